/* agentops control room: the little script the pages need. No inline script (CSP), no eval.
 * Everything written into the page here uses textContent, never innerHTML. */
(function () {
  "use strict";

  /* 1. A run's WebSocket resumes after the newest step the page has.
   * The ws extension keeps the URL it read at page load and reconnects with it; each
   * (re)connect goes through htmx.createWebSocket, so the `after` parameter is refreshed here
   * from the timeline: the server sends exactly the missed steps. */
  function lastSeq() {
    var steps = document.querySelectorAll("#timeline > .step[data-seq]");
    var last = 0;
    steps.forEach(function (el) {
      var seq = parseInt(el.getAttribute("data-seq"), 10);
      if (seq > last) last = seq;
    });
    return last;
  }

  /* 1b. A dropped socket comes back within a few seconds while the server is reachable, at a
   * random moment ("full jitter"): the first try anywhere from 0.25 to 3 s, later ones from
   * 0.25 to 4 s. The browsers of a restarted server (every operator's at once) then come back
   * spread over seconds, not in one wave: half-to-all of 0.5 s had put them all within a
   * quarter of a second. */
  var RECONNECT_FIRST_MS = 3000;
  var RECONNECT_MAX_MS = 4000;
  var RECONNECT_MIN_MS = 250;
  function reconnectDelay(retryCount) {
    var ceiling = Math.min(RECONNECT_MAX_MS, RECONNECT_FIRST_MS * Math.pow(2, Math.min(retryCount, 10)));
    return RECONNECT_MIN_MS + Math.random() * (ceiling - RECONNECT_MIN_MS);
  }

  /* 1c. Every live page says whether what it shows is live: one state per socket (the
   * navigation's approvals stream, a run's timeline), shown in #live-status. */
  var sockets = new Map(); // socket element -> "connecting" | "open" | "retrying" | "closed"
  var everDown = false;
  var leaving = false; // the page is being left: its sockets closing is no news
  var liveAgainTimer = null;
  var RETRIED = [1006, 1011, 1012, 1013]; // the codes the ws extension reconnects after

  function showLiveState() {
    var el = document.getElementById("live-status");
    if (!el) return;
    var states = Array.from(sockets.values());
    var state = "live";
    if (states.indexOf("closed") >= 0) state = "disconnected";
    else if (states.indexOf("retrying") >= 0) state = "reconnecting";
    else if (states.indexOf("connecting") >= 0) state = everDown ? "reconnecting" : "connecting";
    if (state === "live" && everDown) {
      state = "live-again";
      clearTimeout(liveAgainTimer);
      liveAgainTimer = setTimeout(function () {
        everDown = false;
        showLiveState();
      }, 5000);
    }
    var words = {
      connecting: "connecting…",
      live: "live",
      "live-again": "live again: caught up",
      reconnecting: "disconnected: reconnecting…",
      disconnected: "disconnected: reload the page",
    };
    el.setAttribute("data-state", state);
    el.textContent = words[state];
  }

  function onSocketEvent(evt) {
    var elt = evt.target;
    if (leaving) return;
    if (evt.type === "htmx:wsConnecting") {
      if (sockets.get(elt) !== "closed") sockets.set(elt, sockets.get(elt) === "retrying" ? "retrying" : "connecting");
    } else if (evt.type === "htmx:wsOpen") {
      sockets.set(elt, "open");
    } else if (evt.type === "htmx:wsClose") {
      var code = evt.detail && evt.detail.event ? evt.detail.event.code : 0;
      if (!elt.isConnected) sockets.delete(elt);
      else {
        everDown = true;
        sockets.set(elt, RETRIED.indexOf(code) >= 0 ? "retrying" : "closed");
      }
    }
    showLiveState();
  }

  function install() {
    if (!window.htmx) return;
    htmx.config.wsReconnectDelay = reconnectDelay;
    // On the document, now: htmx opens the first sockets before our DOMContentLoaded handler.
    ["htmx:wsConnecting", "htmx:wsOpen", "htmx:wsClose"].forEach(function (name) {
      document.addEventListener(name, onSocketEvent);
    });
    window.addEventListener("pagehide", function () {
      leaving = true;
    });
    var create = htmx.createWebSocket;
    htmx.createWebSocket = function (url) {
      var u = new URL(url, window.location.href);
      if (/^\/ws\/runs\/[0-9a-f-]+\/$/.test(u.pathname)) {
        u.searchParams.set("after", String(lastSeq()));
        url = u.toString();
      }
      if (create) return create(url);
      var sock = new WebSocket(url, []);
      sock.binaryType = htmx.config.wsBinaryType;
      return sock;
    };

    /* 2. Never insert an element whose id is already on the page (a step, a new row):
     * a push that races a page load or a reconnect cannot duplicate anything. */
    document.body.addEventListener("htmx:oobBeforeSwap", function (evt) {
      var frag = evt.detail.fragment;
      if (!(frag instanceof Element)) return; // outerHTML replacement: ids are meant to match
      Array.prototype.slice.call(frag.children).forEach(function (child) {
        if (child.id && document.getElementById(child.id)) child.remove();
      });
    });
  }

  /* 3. Deadlines count down. */
  function tick() {
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var left = Math.floor((Date.parse(el.getAttribute("data-deadline")) - Date.now()) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) {
        el.textContent = "expired";
        el.classList.add("expired");
        return;
      }
      var h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
      el.textContent = (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s left";
      el.classList.toggle("soon", left < 300);
    });
  }

  /* 4. Keyboard shortcuts on the approval screen: a key clicks the button that declares it. */
  function onKey(evt) {
    if (evt.ctrlKey || evt.metaKey || evt.altKey) return;
    var t = evt.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    // Escaped: a key such as " or \ would otherwise make the selector throw.
    var btn = document.querySelector('button[data-shortcut="' + CSS.escape(evt.key.toLowerCase()) + '"]');
    if (btn && !btn.disabled) {
      evt.preventDefault();
      if (btn.hasAttribute("data-focus")) {
        var target = document.querySelector(btn.getAttribute("data-focus"));
        if (target && !target.value) {
          target.focus();
          return;
        }
      }
      btn.click();
    }
  }

  /* 5. The decision buttons follow the argument fields. While a field differs from the proposed
   * call, Approve (which approves the call as proposed) is off and Edit and approve is the
   * primary action; the server refuses a mismatched Approve anyway. After a decision the server
   * sends the buttons back disabled (data-decided) and they stay so.
   * Edit and approve is never switched off while the server previews the edit (#arg-diff):
   * leaving a field fires `change`, which re-runs the preview, and the press that made the field
   * lose focus would land on a disabled button and be lost. Instead a press waits until the
   * preview on screen is the preview of exactly the values in the fields, then goes, so what
   * was on screen is what runs (the server parses and checks the same fields again). */
  var previewOf = null; // the field values the preview on screen was made from
  var sentPreviews = new WeakMap(); // preview request -> the field values it sent
  var heldPress = null; // an Edit and approve press waiting for the preview of its values
  var unheld = false; // the held press is being released without a preview

  function argFields() {
    return document.querySelectorAll("#decision-form [data-original]");
  }

  function fieldValues() {
    var values = [];
    argFields().forEach(function (input) {
      values.push([input.name, input.type === "checkbox" ? input.checked : input.value]);
    });
    return JSON.stringify(values);
  }

  function previewCurrent() {
    return previewOf === fieldValues();
  }

  function fieldsDiffer() {
    var differs = false;
    argFields().forEach(function (input) {
      var now = input.type === "checkbox" ? String(input.checked) : input.value.replace(/\r\n/g, "\n");
      var changed = now !== input.getAttribute("data-original");
      input.classList.toggle("changed", changed);
      if (changed) differs = true;
    });
    return differs;
  }

  function syncDecision() {
    var box = document.getElementById("decision-buttons");
    if (!box) return;
    var form = document.getElementById("decision-form");
    var busy = !!form && form.classList.contains("htmx-request");
    // Decided here, or elsewhere (another approver, the API, the expiry): the approval's
    // state, pushed live and sent again on every reconnect, says so.
    var decided = box.hasAttribute("data-decided") || !!document.querySelector(".approval-state [data-final]");
    var confirmYes = document.getElementById("confirm-approve");
    if (confirmYes) confirmYes.disabled = decided;
    var claim = document.querySelector(".presence form.claim");
    if (claim && decided) claim.hidden = true;
    var differs = fieldsDiffer();
    box.querySelectorAll("button").forEach(function (b) {
      b.disabled = decided || busy;
    });
    var approve = document.getElementById("approve");
    var edit = document.getElementById("edit-approve");
    if (approve) {
      if (differs) approve.disabled = true;
      // A high-risk or irreversible call's Approve never looks like the default action.
      approve.classList.toggle("approve", !differs && !approve.hasAttribute("data-confirm"));
    }
    if (edit) {
      edit.classList.toggle("approve", differs);
      edit.toggleAttribute("aria-busy", heldPress === edit);
    }
    var hint = document.getElementById("approve-blocked");
    if (hint) hint.hidden = !differs || decided;
  }

  /* htmx asks before it sends the decision: an Edit and approve press whose values the preview
   * on screen was not made from is held (the field's own edit has already asked for that
   * preview) and pressed again once it is on screen. */
  function onConfirm(evt) {
    var form = evt.detail.elt;
    if (!form || form.id !== "decision-form") return;
    var trigger = evt.detail.triggeringEvent;
    var button = trigger && trigger.submitter;
    if (!button || button.id !== "edit-approve" || unheld || previewCurrent()) return;
    evt.preventDefault();
    heldPress = button;
    syncDecision();
  }

  function releasePress(force) {
    if (!heldPress || !(force || previewCurrent())) return;
    var button = heldPress;
    heldPress = null;
    syncDecision();
    if (!button.isConnected || button.disabled) return;
    // No preview came (an error): the press goes anyway; the server parses and checks the
    // fields itself and refuses what it must.
    unheld = force;
    button.click(); // the operator's press, made earlier: htmx sees which button it was
    unheld = false;
  }

  function onFieldEdit(evt) {
    var t = evt.target;
    if (!(t && t.hasAttribute && t.hasAttribute("data-original"))) return;
    syncDecision();
  }

  // Sent in the same task as htmx read the fields: these are the values the preview is of.
  function onBeforeRequest(evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt && elt.id === "arg-fields" && evt.detail.xhr) sentPreviews.set(evt.detail.xhr, fieldValues());
  }

  function onPreviewError(evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt && elt.id === "arg-fields") releasePress(true);
  }

  function onRequestDone(evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt && elt.id === "arg-fields") {
      if (evt.detail.successful && sentPreviews.has(evt.detail.xhr)) {
        previewOf = sentPreviews.get(evt.detail.xhr);
      } else if (evt.detail.failed) {
        releasePress(true); // an error answer (a newer preview replacing this one is no failure)
      }
    }
    syncDecision();
    if (elt && elt.id === "decision-form") {
      var outcome = document.getElementById("decision-outcome");
      if (outcome) outcome.scrollIntoView({ block: "nearest" });
      // Approve asked to confirm the effect: the confirmation takes the keyboard, so Enter
      // (or y) is the second and last key.
      var confirm = document.getElementById("confirm-approve");
      if (confirm) confirm.focus();
    }
  }

  function onSettle() {
    syncDecision();
    releasePress(false); // after the settle: the new preview's attributes are in place
  }

  /* 6. "Not now" on an approve's confirmation: nothing was decided, the question goes away. */
  function onClick(evt) {
    var t = evt.target;
    if (!(t instanceof Element) || !t.closest("#confirm-cancel")) return;
    var box = document.getElementById("decision-result");
    if (!box) return;
    while (box.firstChild) box.removeChild(box.firstChild);
    box.className = "";
    box.removeAttribute("data-status");
    var approve = document.getElementById("approve");
    if (approve) approve.focus();
  }

  /* 3b. Live pushes are broadcast: one message serves every page that shows the thing. Pieces
   * whose target is not on this page are dropped before htmx swaps (htmx would log an error).
   * Parsed in a <template>, whose content is inert (no script runs, no image loads). */
  function defineLiveTargets() {
    if (!window.htmx) return;
    htmx.defineExtension("live-targets", {
      transformResponse: function (text, xhr) {
        if (xhr) return text; // only WebSocket messages
        var tpl = document.createElement("template");
        tpl.innerHTML = text;
        dropDrafts(tpl.content);
        Array.prototype.slice.call(tpl.content.children).forEach(function (child) {
          var oob = child.getAttribute("hx-swap-oob") || "true";
          var colon = oob.indexOf(":");
          var selector = colon > 0 ? oob.slice(colon + 1) : child.id ? "#" + CSS.escape(child.id) : "";
          if (!selector || !document.querySelector(selector)) child.remove();
        });
        return tpl.innerHTML;
      },
    });
  }

  /* 3c. The model's text while it writes (#draft, data-draft-seq: the seq its step will
   * have) is never shown with its step: a draft whose step (or what took its seq, an error or
   * a cancel) is on the page is not swapped in, and a step that arrives clears the draft, in
   * the same task as the step's swap, so no frame shows both. */
  function dropDrafts(content) {
    var last = lastSeq();
    var newest = 0;
    content.querySelectorAll(".step[data-seq]").forEach(function (el) {
      newest = Math.max(newest, parseInt(el.getAttribute("data-seq"), 10) || 0);
    });
    var incoming = content.querySelector("#draft[data-draft-seq]");
    if (incoming && parseInt(incoming.getAttribute("data-draft-seq"), 10) <= Math.max(last, newest)) {
      incoming.remove();
    }
    var shown = document.querySelector("#draft[data-draft-seq]");
    if (shown && newest && parseInt(shown.getAttribute("data-draft-seq"), 10) <= newest) {
      var empty = document.createElement("div");
      empty.id = "draft";
      shown.replaceWith(empty);
    }
  }

  /* The queue's batch ticks survive a live push that re-renders the rows: a row's value
   * names its approval and the hash of its call, so only the same call is ticked again. */
  var ticked = {};
  function rememberTick(evt) {
    var box = evt.target;
    if (!box.classList || !box.classList.contains("batch-pick")) return;
    if (box.checked) ticked[box.value] = true;
    else delete ticked[box.value];
  }
  function restoreTicks() {
    document.querySelectorAll("input.batch-pick").forEach(function (box) {
      if (ticked[box.value]) box.checked = true;
    });
  }

  /* 7. The run's timeline. "Next gate / error" goes to the next such step after the one it
   * last went to (else below the top of the screen), among the steps on the page, and
   * unfolds it; past the last one it starts
   * again from the first on the page and says so. With none on the page it says so too, and,
   * when older steps are not loaded (a live page keeps the newest), offers to load them or to
   * show every such step of the run (the server-side filter). Live steps keep the page
   * bounded: past MAX_LIVE_STEPS the oldest leave the page and "Load older" brings them back. */
  var MAX_LIVE_STEPS = 200;

  function onJump(evt) {
    var t = evt.target;
    var btn = t instanceof Element ? t.closest("[data-jump]") : null;
    if (!btn) return;
    var what = btn.getAttribute("data-jump");
    var sel = what === "error" ? "#timeline .step[data-error]" : '#timeline .step[data-cat="' + CSS.escape(what) + '"]';
    var steps = Array.prototype.slice.call(document.querySelectorAll(sel));
    // After the one jumped to last (the page may not scroll far enough to move it up), else
    // the first below the top of the screen.
    var current = steps.indexOf(document.querySelector("#timeline .step.jumped"));
    var below = current >= 0
      ? steps[current + 1]
      : steps.filter(function (s) { return s.getBoundingClientRect().top > 8; })[0];
    var next = below || steps[0];
    btn.classList.toggle("none-found", !next);
    if (!next) {
      jumpStatus(what, "No " + what + " on this page.", true);
      return;
    }
    jumpStatus(what, below ? "" : "No " + what + " further down: back to the first on this page.", !below);
    var fold = next.querySelector("details.step-fold");
    if (fold) fold.open = true;
    document.querySelectorAll("#timeline .step.jumped").forEach(function (s) { s.classList.remove("jumped"); });
    next.classList.add("jumped");
    next.scrollIntoView({ block: "start" });
  }

  /* What a jump found, in words (#jump-status), with what the page can do about steps it
   * does not hold: load the older ones, or show every such step of the run. */
  function jumpStatus(what, message, offerMore) {
    var status = document.getElementById("jump-status");
    if (!status) return;
    status.replaceChildren();
    if (!message) return;
    status.append(message);
    var older = document.querySelector("#load-older button");
    var timeline = document.getElementById("timeline");
    if (!offerMore || !older || !timeline || timeline.hasAttribute("data-filtered")) return;
    status.append(" Older steps are not loaded: ");
    var load = document.createElement("button");
    load.type = "button";
    load.className = "link";
    load.id = "jump-load-older";
    load.textContent = "Load older";
    load.addEventListener("click", function () {
      status.replaceChildren();
      var current = document.querySelector("#load-older button");
      if (current) current.click();
    });
    var all = document.createElement("a");
    all.id = "jump-show-all";
    all.href = "?kind=" + encodeURIComponent(what);
    all.textContent = "show every " + what + " of the run";
    status.append(load, " or ", all, ".");
  }

  function boundTimeline() {
    var timeline = document.getElementById("timeline");
    if (!timeline || timeline.hasAttribute("data-filtered")) return;
    var steps = timeline.querySelectorAll(":scope > .step");
    var extra = steps.length - MAX_LIVE_STEPS;
    if (extra <= 0) return;
    for (var i = 0; i < extra; i++) steps[i].remove();
    var first = steps[extra].getAttribute("data-seq");
    var older = document.getElementById("load-older");
    if (!older || !window.htmx) return;
    var button = document.createElement("button");
    button.type = "button";
    button.setAttribute("hx-get", older.getAttribute("data-steps-url") + "?before=" + first);
    button.setAttribute("hx-target", "#timeline");
    button.setAttribute("hx-swap", "afterbegin");
    button.textContent = "Load older steps (before #" + first + ")";
    older.replaceChildren(button);
    htmx.process(button);
  }

  /* 8. The decision screen tells the server a decider opened it (time to decide counts from
   * here). A beacon, not an htmx request: best effort, it never holds anything up, and one
   * cut short by a quick decision or a reload is no error. */
  function reportOpened() {
    var el = document.querySelector("[data-opened-url]");
    var csrf = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (!el || !csrf || !window.fetch) return;
    fetch(el.getAttribute("data-opened-url"), {
      method: "POST",
      credentials: "same-origin",
      keepalive: true,
      headers: { "X-CSRFToken": csrf.value },
    }).catch(function () {});
  }

  // Deferred scripts run in order after parsing: htmx and its ws extension are loaded, and
  // htmx connects sockets on DOMContentLoaded, after this.
  install();
  defineLiveTargets();
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    document.addEventListener("keydown", onKey);
    document.addEventListener("click", onClick);
    document.addEventListener("input", onFieldEdit);
    document.addEventListener("change", onFieldEdit);
    document.body.addEventListener("htmx:confirm", onConfirm);
    document.body.addEventListener("htmx:beforeRequest", onBeforeRequest);
    document.body.addEventListener("htmx:sendError", onPreviewError);
    document.body.addEventListener("htmx:beforeSend", syncDecision);
    document.body.addEventListener("htmx:afterRequest", onRequestDone);
    document.body.addEventListener("htmx:afterSettle", onSettle);
    document.addEventListener("change", rememberTick);
    document.body.addEventListener("htmx:oobAfterSwap", restoreTicks);
    document.body.addEventListener("htmx:oobAfterSwap", syncDecision);
    document.body.addEventListener("htmx:wsAfterMessage", boundTimeline);
    document.addEventListener("click", onJump);
    reportOpened();
    previewOf = fieldValues(); // the page came with the preview of the fields it shows
    syncDecision();
  });
})();
