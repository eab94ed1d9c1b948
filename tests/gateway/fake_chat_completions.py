"""A fake OpenAI Chat Completions API for the OpenAI Agents SDK's tests (a test-only
stand-in, like tests/support/fake_messages_api.py for the Messages API): each request gets the next
scripted turn. A turn is ("tool", name, arguments) or ("text", content)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeChatCompletions:
    def __init__(self, turns: list[tuple]):
        self.turns = list(turns)
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                turn = fake.turns.pop(0) if fake.turns else ("text", "done")
                raw = json.dumps(fake.completion(turn, len(fake.requests))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    @staticmethod
    def completion(turn: tuple, n: int) -> dict:
        if turn[0] == "tool":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": turn[1], "arguments": json.dumps(turn[2])},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": turn[1]}, "stop"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    def tool_outputs(self) -> list[str]:
        """What the model was told each tool call returned, in order."""
        seen = []
        for body in self.requests:
            for message in body["messages"]:
                if message.get("role") == "tool" and message["content"] not in seen:
                    seen.append(message["content"])
        return seen

    def stop(self) -> None:
        self.server.shutdown()
