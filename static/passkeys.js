// Tally's one script (SPEC §11): the WebAuthn ceremonies of the sign-in,
// second-step, confirmation and account pages, through the JSON endpoints
// /account/passkeys[/options] and /signin/passkey[/options]. Every page works
// without it; it only shows the passkey buttons when the browser can use them.
"use strict";

(function () {
  if (!window.PublicKeyCredential || !navigator.credentials) {
    return;
  }

  function toBase64url(buffer) {
    const bytes = new Uint8Array(buffer);
    let text = "";
    for (const byte of bytes) {
      text += String.fromCharCode(byte);
    }
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function fromBase64url(text) {
    const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const padded = base64 + "===".slice((base64.length + 3) % 4);
    return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0)).buffer;
  }

  function creationOptions(json) {
    if (PublicKeyCredential.parseCreationOptionsFromJSON) {
      return PublicKeyCredential.parseCreationOptionsFromJSON(json);
    }
    const options = Object.assign({}, json);
    options.challenge = fromBase64url(json.challenge);
    options.user = Object.assign({}, json.user, { id: fromBase64url(json.user.id) });
    options.excludeCredentials = (json.excludeCredentials || []).map((c) =>
      Object.assign({}, c, { id: fromBase64url(c.id) }));
    return options;
  }

  function requestOptions(json) {
    if (PublicKeyCredential.parseRequestOptionsFromJSON) {
      return PublicKeyCredential.parseRequestOptionsFromJSON(json);
    }
    const options = Object.assign({}, json);
    options.challenge = fromBase64url(json.challenge);
    options.allowCredentials = (json.allowCredentials || []).map((c) =>
      Object.assign({}, c, { id: fromBase64url(c.id) }));
    return options;
  }

  function credentialJSON(credential) {
    if (typeof credential.toJSON === "function") {
      return credential.toJSON();
    }
    const response = {};
    for (const name of ["clientDataJSON", "attestationObject", "authenticatorData", "signature", "userHandle"]) {
      if (credential.response[name]) {
        response[name] = toBase64url(credential.response[name]);
      }
    }
    return {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      response: response,
      clientExtensionResults: credential.getClientExtensionResults(),
    };
  }

  async function post(path, csrfToken, body) {
    const response = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken },
      body: JSON.stringify(body || {}),
    });
    let answer = {};
    try {
      answer = await response.json();
    } catch (_) {
      answer = {};
    }
    if (!response.ok) {
      throw new Error(answer.error || "The passkey did not work. Try again.");
    }
    return answer;
  }

  function showError(box, error) {
    const line = box.querySelector(".js-passkey-error");
    if (line) {
      line.textContent = error.message || String(error);
      line.hidden = false;
    }
  }

  // Signing in (alone or as the second step) and confirming an action.
  for (const box of document.querySelectorAll(".passkey-option")) {
    const button = box.querySelector(".js-passkey-sign-in");
    const mode = box.dataset.passkeyMode;
    const csrfToken = box.dataset.csrfToken;
    box.hidden = false;
    button.addEventListener("click", async () => {
      try {
        const purpose = mode === "step_up" ? { purpose: "step_up" } : {};
        const options = await post("/signin/passkey/options", csrfToken, purpose);
        const credential = await navigator.credentials.get({ publicKey: requestOptions(options.publicKey) });
        let path = "/signin/passkey";
        if (box.dataset.returnTo) {
          path += "?return_to=" + encodeURIComponent(box.dataset.returnTo);
        }
        const answer = await post(path, csrfToken, credentialJSON(credential));
        if (mode === "step_up") {
          // The action's form again: the session now has a fresh factor.
          document.getElementById(box.dataset.form).submit();
        } else {
          window.location.assign(answer.redirect);
        }
      } catch (error) {
        showError(box, error);
      }
    });
  }

  // Adding a passkey on the account page.
  for (const box of document.querySelectorAll(".passkey-add")) {
    const button = box.querySelector(".js-passkey-add");
    const csrfToken = box.dataset.csrfToken;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        const name = box.querySelector("#passkey_name").value;
        const options = await post("/account/passkeys/options", csrfToken, { name: name });
        const credential = await navigator.credentials.create({ publicKey: creationOptions(options.publicKey) });
        const answer = await post("/account/passkeys", csrfToken, credentialJSON(credential));
        if (answer.recovery_codes) {
          const list = document.createElement("ol");
          list.className = "recovery-codes";
          for (const code of answer.recovery_codes) {
            const item = document.createElement("li");
            const text = document.createElement("code");
            text.textContent = code;
            item.appendChild(text);
            list.appendChild(item);
          }
          const heading = document.createElement("p");
          heading.className = "notice";
          heading.textContent = "Your passkey is added. Keep these recovery codes somewhere safe: they are shown only now.";
          const back = document.createElement("a");
          back.href = "/account#security";
          back.textContent = "Done";
          box.replaceChildren(heading, list, back);
        } else {
          window.location.assign("/account#security");
          window.location.reload();
        }
      } catch (error) {
        showError(box, error);
      }
    });
  }
})();
