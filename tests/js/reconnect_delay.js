// Loads static/js/app.js in a bare sandbox (stand-ins for the DOM and htmx: anything it asks
// for is a callable no-op) and prints, as JSON, the reconnect delays it gives htmx for retry
// counts 0..6, `samples` draws each. Run by tests/test_client_script.py.
"use strict";
const fs = require("fs");
const vm = require("vm");

const [, , script, samplesArg] = process.argv;
const samples = parseInt(samplesArg || "500", 10);

const anything = new Proxy(function () {}, {
  get: (target, key) => (key === Symbol.toPrimitive ? () => "" : key === "length" ? 0 : anything),
  apply: () => anything,
  construct: () => anything,
});
const htmx = new Proxy({ config: {} }, { get: (t, key) => (key in t ? t[key] : anything) });
const known = {
  htmx,
  document: anything,
  location: { href: "http://testserver/" },
  addEventListener: () => {},
  setTimeout: () => 0,
  setInterval: () => 0,
  clearTimeout: () => {},
  console,
  Map,
  URL,
  Math,
  JSON,
  Array,
  Object,
  Date,
  parseInt,
  String,
  Number,
};
const windowProxy = new Proxy(known, {
  get: (target, key) => (key in target ? target[key] : anything),
  has: () => true,
});
known.window = windowProxy;
vm.createContext(known);
vm.runInContext(fs.readFileSync(script, "utf8"), known, { filename: script });

const delay = htmx.config.wsReconnectDelay;
if (typeof delay !== "function") throw new Error("app.js set no reconnect delay");
const out = {};
for (let retry = 0; retry <= 6; retry++) {
  out[retry] = Array.from({ length: samples }, () => delay(retry));
}
process.stdout.write(JSON.stringify(out));
