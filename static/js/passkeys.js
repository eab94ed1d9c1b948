/* Security keys and passkeys (WebAuthn), and the recovery codes' copy and download buttons.
 * No inline script (CSP): pages mark their forms with data attributes and this file does the
 * rest. A form with data-webauthn="register" or "authenticate" posts to its data-options URL
 * for the server's options (and challenge), calls navigator.credentials, posts the answer as
 * JSON to its action, and follows the {"redirect"} it gets back or shows the {"error"}.
 * Everything written into the page uses textContent, never innerHTML. */
(function () {
  "use strict";

  function toBytes(base64url) {
    var base64 = base64url.replace(/-/g, "+").replace(/_/g, "/");
    while (base64.length % 4) base64 += "=";
    var raw = atob(base64);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes.buffer;
  }

  function toBase64url(buffer) {
    var bytes = new Uint8Array(buffer);
    var raw = "";
    for (var i = 0; i < bytes.length; i++) raw += String.fromCharCode(bytes[i]);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function descriptors(list) {
    return (list || []).map(function (d) {
      return { type: d.type, id: toBytes(d.id), transports: d.transports };
    });
  }

  function creationOptions(o) {
    o.challenge = toBytes(o.challenge);
    o.user.id = toBytes(o.user.id);
    o.excludeCredentials = descriptors(o.excludeCredentials);
    return o;
  }

  function requestOptions(o) {
    o.challenge = toBytes(o.challenge);
    o.allowCredentials = descriptors(o.allowCredentials);
    return o;
  }

  function registrationJSON(c) {
    var r = c.response;
    return {
      id: c.id,
      rawId: toBase64url(c.rawId),
      type: c.type,
      response: {
        clientDataJSON: toBase64url(r.clientDataJSON),
        attestationObject: toBase64url(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : [],
      },
      clientExtensionResults: c.getClientExtensionResults(),
      authenticatorAttachment: c.authenticatorAttachment,
    };
  }

  function authenticationJSON(c) {
    var r = c.response;
    return {
      id: c.id,
      rawId: toBase64url(c.rawId),
      type: c.type,
      response: {
        clientDataJSON: toBase64url(r.clientDataJSON),
        authenticatorData: toBase64url(r.authenticatorData),
        signature: toBase64url(r.signature),
        userHandle: r.userHandle ? toBase64url(r.userHandle) : null,
      },
      clientExtensionResults: c.getClientExtensionResults(),
      authenticatorAttachment: c.authenticatorAttachment,
    };
  }

  function post(url, token, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": token },
      body: body === undefined ? "{}" : JSON.stringify(body),
    }).then(function (response) {
      return response.json().then(function (data) {
        if (!response.ok && !data.error) data.error = "The server refused (" + response.status + ").";
        return data;
      });
    });
  }

  function ceremony(form) {
    var kind = form.getAttribute("data-webauthn");
    var status = form.querySelector("[data-webauthn-status]");
    var button = form.querySelector("button");
    var token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    function say(words) {
      status.textContent = words;
      status.hidden = !words;
    }
    if (!window.PublicKeyCredential || !navigator.credentials) {
      say("This browser cannot use security keys here (it needs HTTPS, or localhost).");
      return;
    }
    say("");
    button.disabled = true;
    post(form.getAttribute("data-options"), token)
      .then(function (options) {
        if (options.error) throw new Error(options.error);
        if (kind === "register") {
          return navigator.credentials
            .create({ publicKey: creationOptions(options) })
            .then(function (c) {
              var name = form.querySelector("input[name=name]");
              return { name: name ? name.value : "", credential: registrationJSON(c) };
            });
        }
        return navigator.credentials.get({ publicKey: requestOptions(options) }).then(function (c) {
          return { credential: authenticationJSON(c) };
        });
      })
      .then(function (answer) {
        return post(form.getAttribute("action"), token, answer);
      })
      .then(function (result) {
        if (result.redirect && !result.error) {
          window.location.assign(result.redirect);
          return;
        }
        say(result.error);
        if (result.redirect) window.location.assign(result.redirect);
      })
      .catch(function (error) {
        // NotAllowedError: the person cancelled, or the prompt timed out.
        say(error && error.name === "NotAllowedError" ? "Cancelled or timed out: try again." : String(error.message || error));
      })
      .finally(function () {
        button.disabled = false;
      });
  }

  function codesText(list) {
    var codes = [];
    list.querySelectorAll("li code").forEach(function (el) {
      codes.push(el.textContent.trim());
    });
    return "agentops recovery codes (each works once)\n\n" + codes.join("\n") + "\n";
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-webauthn]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        ceremony(form);
      });
    });
    var list = document.getElementById("recovery-codes-fresh");
    if (!list) return;
    var copy = document.getElementById("recovery-codes-copy");
    var download = document.getElementById("recovery-codes-download");
    copy.hidden = download.hidden = false;
    copy.addEventListener("click", function () {
      navigator.clipboard.writeText(codesText(list)).then(function () {
        copy.textContent = "Copied";
      });
    });
    download.addEventListener("click", function () {
      var url = URL.createObjectURL(new Blob([codesText(list)], { type: "text/plain" }));
      var link = document.createElement("a");
      link.href = url;
      link.download = "agentops-recovery-codes.txt";
      document.body.appendChild(link);
      link.click();
      link.remove();
      // The browser reads the blob after the click returns: revoked at once, a busy browser
      // could cancel the download.
      setTimeout(function () {
        URL.revokeObjectURL(url);
      }, 10000);
    });
  });
})();
