// The fast-lane access page: shows the merchant's offers, gets a session, and pays with a
// wallet adapter (see wallet-adapters.js) through the x402 v2 exchange at /_concert/payment.
//
// A signed payment is kept in sessionStorage until the server gives a final answer, and only
// that same payment is ever sent again, so a lost answer can never lead to paying twice.
(function () {
  "use strict";

  var PENDING_KEY = "concert.pending-payment";
  var BASE = "/_concert";
  // Decimal places of each chain's native unit, by CAIP-2 family.
  var DECIMALS = { xrpl: 6, solana: 9, stellar: 7, hedera: 8 };
  var UNITS = { xrpl: "XRP", solana: "SOL", stellar: "XLM", hedera: "HBAR" };

  var csrf = "";
  var config = null;

  function $(id) { return document.getElementById(id); }

  function say(text) { $("state").textContent = text; }

  function family(network) { return String(network).split(":")[0]; }

  // Atomic units as a decimal string in display units, without floating point.
  function displayAmount(atomic, network) {
    var places = DECIMALS[family(network)];
    var digits = String(atomic);
    if (!/^[0-9]+$/.test(digits) || places === undefined) { return digits; }
    while (digits.length <= places) { digits = "0" + digits; }
    var whole = digits.slice(0, digits.length - places);
    var fraction = digits.slice(digits.length - places);
    return whole + "." + fraction + " " + (UNITS[family(network)] || "");
  }

  // Where to go after paying: a same-origin path outside /_concert, else the site's root.
  function returnTarget() {
    var wanted = new URLSearchParams(window.location.search).get("return");
    if (!wanted) { return "/"; }
    try {
      var target = new URL(wanted, window.location.origin);
      if (target.origin !== window.location.origin) { return "/"; }
      if (target.pathname === BASE || target.pathname.indexOf(BASE + "/") === 0) { return "/"; }
      return target.pathname + target.search + target.hash;
    } catch (e) {
      return "/";
    }
  }

  var BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
  var SYSTEM_PROGRAM = "11111111111111111111111111111111";

  function base58(bytes) {
    var digits = [];
    for (var i = 0; i < bytes.length; i++) {
      var carry = bytes[i];
      for (var j = 0; j < digits.length; j++) {
        carry += digits[j] << 8;
        digits[j] = carry % 58;
        carry = (carry / 58) | 0;
      }
      while (carry > 0) { digits.push(carry % 58); carry = (carry / 58) | 0; }
    }
    var out = "";
    for (var k = 0; k < bytes.length && bytes[k] === 0; k++) { out += "1"; }
    for (var m = digits.length - 1; m >= 0; m--) { out += BASE58[digits[m]]; }
    return out;
  }

  // Solana's compact-u16 length prefix.
  function compactU16(bytes, at) {
    var value = 0;
    for (var shift = 0, i = 0; i < 3; i++, shift += 7) {
      var b = bytes[at.pos++];
      value |= (b & 0x7f) << shift;
      if ((b & 0x80) === 0) { return value; }
    }
    throw new Error("bad_length");
  }

  // Refuses a prepared transfer unless it is exactly one System transfer of the offer's amount
  // from the connected wallet to the merchant, so the wallet is never asked to sign more.
  function checkPreparedSolana(prepared, terms, from) {
    var encoded = prepared.transaction || prepared.message || "";
    var bytes = Uint8Array.from(window.atob(encoded), function (c) { return c.charCodeAt(0); });
    var at = { pos: 0 };
    var signatures = compactU16(bytes, at);
    at.pos += 64 * signatures;
    if (bytes[at.pos] & 0x80) { throw new Error("versioned_transaction_refused"); }
    at.pos += 3;
    var keyCount = compactU16(bytes, at);
    var keys = [];
    for (var i = 0; i < keyCount; i++) {
      keys.push(base58(bytes.slice(at.pos, at.pos + 32)));
      at.pos += 32;
    }
    at.pos += 32; // recent blockhash
    var instructions = compactU16(bytes, at);
    if (instructions !== 1) { throw new Error("unexpected_instructions"); }
    var program = keys[bytes[at.pos++]];
    var accountCount = compactU16(bytes, at);
    var accounts = [];
    for (var a = 0; a < accountCount; a++) { accounts.push(keys[bytes[at.pos++]]); }
    var dataLength = compactU16(bytes, at);
    var data = bytes.slice(at.pos, at.pos + dataLength);
    if (program !== SYSTEM_PROGRAM || dataLength !== 12 || data[0] !== 2 || data[1] || data[2] || data[3]) {
      throw new Error("not_a_transfer");
    }
    var lamports = 0n;
    for (var d = 11; d >= 4; d--) { lamports = (lamports << 8n) | BigInt(data[d]); }
    if (keys[0] !== from || accounts[0] !== from || accounts[1] !== terms.payTo ||
        lamports.toString() !== String(terms.amount)) {
      throw new Error("prepared_transfer_mismatch");
    }
    return prepared;
  }

  function adapterFor(network) {
    var wallets = window.concertWallets || {};
    return wallets[network] || wallets[family(network)] || null;
  }

  function toBase64(text) {
    var bytes = new TextEncoder().encode(text);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) { binary += String.fromCharCode(bytes[i]); }
    return window.btoa(binary);
  }

  function fromBase64(text) {
    var binary = window.atob(text);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) { bytes[i] = binary.charCodeAt(i); }
    return new TextDecoder().decode(bytes);
  }

  async function readJson(response) {
    try { return await response.json(); } catch (e) { return {}; }
  }

  async function startSession() {
    var response = await fetch(BASE + "/session", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: "{}"
    });
    var body = await readJson(response);
    if (!response.ok || !body.csrf) { throw new Error(body.error || "session_failed"); }
    csrf = body.csrf;
    return body;
  }

  // POST with the session's CSRF value; renews the session once when the server asks.
  async function post(path, headers, body) {
    if (!csrf) { await startSession(); }
    for (var attempt = 0; attempt < 2; attempt++) {
      var all = { "Content-Type": "application/json", "X-Concert-CSRF": csrf };
      Object.keys(headers || {}).forEach(function (name) { all[name] = headers[name]; });
      var response = await fetch(BASE + path, {
        method: "POST",
        credentials: "same-origin",
        headers: all,
        body: body || "{}"
      });
      if (attempt === 0 && (response.status === 409 || response.status === 401 || response.status === 403)) {
        var peek = await readJson(response.clone());
        if (peek.error === "session_renewal_required" || peek.error === "session_required" ||
            peek.error === "csrf_required") {
          await startSession();
          continue;
        }
      }
      return response;
    }
    return response;
  }

  function pending() {
    try { return window.sessionStorage.getItem(PENDING_KEY); } catch (e) { return null; }
  }

  function keepPending(header) {
    try { window.sessionStorage.setItem(PENDING_KEY, header); } catch (e) { /* private mode */ }
  }

  function dropPending() {
    try { window.sessionStorage.removeItem(PENDING_KEY); } catch (e) { /* private mode */ }
    $("pending").hidden = true;
  }

  function done(body) {
    dropPending();
    var until = body.expires ? new Date(body.expires).toLocaleTimeString() : "";
    say("Paid. You are in the fast lane" + (until ? " until " + until : "") + ". Taking you back…");
    window.setTimeout(function () { window.location.assign(returnTarget()); }, 1500);
  }

  // Sends the stored payment exactly as it was signed and acts on the answer.
  async function sendPending() {
    var header = pending();
    if (!header) { return; }
    $("pending").hidden = false;
    say("Sending your payment…");
    var response = await post("/payment", { "PAYMENT-SIGNATURE": header });
    var body = await readJson(response);
    if (response.ok) { done(body); return; }
    var code = body.error || String(response.status);
    if (response.status === 503 || code === "request_in_progress" || code === "verification_busy") {
      // The outcome is open: keep the signed payment and offer the identical retry.
      say("The payment's result is not known yet (" + code + "). Do not pay again; retry below.");
      return;
    }
    if (code === "previous_payment_unresolved_do_not_pay_again") {
      say("An earlier payment of this session is unresolved. Do not pay again; contact the merchant.");
      return;
    }
    // A final refusal: this signed payment will never be taken, so it is dropped.
    dropPending();
    if (code === "quote_expired") {
      say("The price quoted for your place in the line has ended; nothing was charged. Choose the offer again for today's price.");
      return;
    }
    say("The payment was not accepted (" + code + "). Nothing was charged by this page.");
  }

  // The same offer, whatever its price: line pricing changes only the amount (and adds the
  // quote that vouches for it).
  function offerKey(terms) {
    return [terms.scheme, terms.network, terms.asset, terms.payTo].join(" ");
  }

  // When a line-priced quote stops starting payments (unix seconds); never for a plain offer.
  function quoteEnds(terms) {
    var quote = terms.extra && terms.extra.concertQuote;
    var parts = typeof quote === "string" ? quote.split(".") : [];
    return parts.length === 3 ? Number(parts[1]) : Infinity;
  }

  // Quotes the visitor has been shown, by offer: paying takes the price they saw.
  var shownQuotes = {};

  async function pay(offer, button) {
    if (pending()) { await sendPending(); return; }
    var terms = offer.requirements;
    var adapter = adapterFor(terms.network);
    if (!adapter) { $("no-wallet").hidden = false; return; }
    say("Connecting to your wallet…");
    var probe = await post("/payment", {});
    var probeBody = await readJson(probe);
    if (probe.ok) { done(probeBody); return; }
    if (probe.status !== 402) { say("The fast lane cannot take payments now (" + (probeBody.error || probe.status) + ")."); return; }
    var required = JSON.parse(fromBase64(probe.headers.get("PAYMENT-REQUIRED") || toBase64(JSON.stringify(probeBody))));
    var accepted = (required.accepts || []).filter(function (candidate) {
      return offerKey(candidate) === offerKey(terms);
    })[0];
    var quoted = accepted && quoteEnds(accepted) !== Infinity;
    if (!accepted || (!quoted && JSON.stringify(accepted) !== JSON.stringify(terms))) {
      say("The offer changed; reload the page."); return;
    }
    if (quoted) {
      // The price follows the visitor's place in the line: show it before any wallet asks,
      // and pay the price shown while its quote lasts (a minute of margin for the wallet).
      var shown = shownQuotes[offerKey(terms)];
      if (shown && quoteEnds(shown) > Date.now() / 1000 + 60) {
        accepted = shown;
      } else {
        shownQuotes[offerKey(terms)] = accepted;
        var price = displayAmount(accepted.amount, accepted.network);
        button.textContent = offer.label + " — " + price;
        say("For your place in the line the price is " + price + " (the offer starts at " +
          displayAmount(terms.amount, terms.network) + "). Choose the offer again to pay it.");
        return;
      }
    }
    var account = await adapter.connect({ network: accepted.network, offer: offer });
    var payload = await adapter.createPaymentPayload({
      network: accepted.network,
      address: account.address,
      requirements: accepted,
      resource: required.resource,
      prepare: async function (address) {
        var prepared = await post("/solana/prepare", {}, JSON.stringify({ network: accepted.network, from: address, accepted: accepted }));
        var preparedBody = await readJson(prepared);
        if (!prepared.ok) { throw new Error(preparedBody.error || "prepare_failed"); }
        return checkPreparedSolana(preparedBody, accepted, address);
      }
    });
    var payment = { x402Version: 2, resource: required.resource, accepted: accepted, payload: payload };
    // Stored before sending: if the answer is lost, this exact payment is what gets retried.
    keepPending(toBase64(JSON.stringify(payment)));
    await sendPending();
  }

  // Signatures may come back as base64 or as bytes; the server takes base64.
  function signatureText(signature) {
    if (typeof signature === "string") { return signature; }
    var bytes = signature instanceof Uint8Array ? signature : new Uint8Array(signature || []);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) { binary += String.fromCharCode(bytes[i]); }
    return window.btoa(binary);
  }

  // NFT admission: challenge -> the wallet signs the message -> verify. A verified holder
  // gets a lease of nft_pass_seconds; nothing is paid.
  async function proveHolding(rule, tokenInput) {
    var adapter = adapterFor(rule.network);
    if (!adapter || !adapter.signMessage) { $("no-wallet").hidden = false; return; }
    var token = tokenInput ? tokenInput.value.trim() : "";
    if (rule.token === "required" && !token) {
      say("Enter the NFT's mint address first.");
      if (tokenInput) { tokenInput.focus(); }
      return;
    }
    say("Connecting to your wallet…");
    var account = await adapter.connect({ network: rule.network, collection: rule });
    var asked = await post("/nft/challenge", {}, JSON.stringify({ rule: rule.id, address: account.address, token_id: token }));
    var challenge = await readJson(asked);
    if (!asked.ok) { say("The wallet could not be checked (" + (challenge.error || asked.status) + ")."); return; }
    say("Sign the message in your wallet. It proves you hold the NFT and authorises no payment.");
    var signed = await adapter.signMessage({ network: challenge.network, address: account.address, message: challenge.message });
    var checked = await post("/nft/verify", {}, JSON.stringify({
      nonce: challenge.nonce,
      signature: signatureText(signed.signature),
      public_key: signed.publicKey || ""
    }));
    var body = await readJson(checked);
    if (checked.ok) {
      var until = body.expires ? new Date(body.expires).toLocaleTimeString() : "";
      say("Verified. You are in the fast lane" + (until ? " until " + until : "") + ". Taking you back…");
      window.setTimeout(function () { window.location.assign(returnTarget()); }, 1500);
      return;
    }
    var code = body.error || String(checked.status);
    if (code === "ownership_not_verified") { say("That wallet does not hold an NFT of " + rule.label + "."); return; }
    if (code === "challenge_expired_or_used") { say("The signed message expired; try again."); return; }
    say("The NFT could not be checked now (" + code + "). Try again shortly.");
  }

  function showCollections() {
    var rules = config.collections || [];
    if (!rules.length) { return; }
    var list = $("collections");
    rules.forEach(function (rule) {
      var item = document.createElement("li");
      var tokenInput = null;
      if (rule.token === "required" || rule.token === "optional") {
        tokenInput = document.createElement("input");
        tokenInput.type = "text";
        tokenInput.maxLength = 128;
        tokenInput.autocomplete = "off";
        tokenInput.spellcheck = false;
        tokenInput.placeholder = rule.token === "required" ? "NFT mint address" : "Token id (optional)";
        tokenInput.setAttribute("aria-label", rule.label + ": " + tokenInput.placeholder);
        item.appendChild(tokenInput);
      }
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = "I hold " + rule.label;
      var adapter = adapterFor(rule.network);
      if (!adapter || !adapter.signMessage) {
        button.disabled = true;
        button.title = "No wallet adapter for " + rule.network;
      }
      button.addEventListener("click", function () {
        proveHolding(rule, tokenInput).catch(function (e) { say("Something went wrong: " + e.message); });
      });
      item.appendChild(button);
      list.appendChild(item);
    });
    $("nft").hidden = false;
  }

  function showOffers() {
    $("merchant").textContent = config.merchant || "Fast lane";
    var minutes = Math.round((config.pass_seconds || 0) / 60);
    $("summary").textContent = "Skip the line for " + (minutes > 1 ? minutes + " minutes" : minutes === 1 ? "a minute" : config.pass_seconds + " seconds") +
      ". Entry still depends on the site's capacity.";
    [["terms", config.terms_url], ["privacy", config.privacy_url], ["refund", config.refund_url]].forEach(function (link) {
      if (link[1]) { $(link[0]).href = link[1]; } else { $(link[0]).hidden = true; }
    });
    var list = $("offers");
    var anyAdapter = false;
    (config.offers || []).forEach(function (offer) {
      var terms = offer.requirements;
      var item = document.createElement("li");
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = offer.label + " — " + displayAmount(terms.amount, terms.network);
      if (adapterFor(terms.network)) {
        anyAdapter = true;
      } else {
        button.disabled = true;
        button.title = "No wallet adapter for " + terms.network;
      }
      button.addEventListener("click", function () {
        pay(offer, button).catch(function (e) { say("Something went wrong: " + e.message); });
      });
      item.appendChild(button);
      list.appendChild(item);
    });
    showCollections();
    if (!anyAdapter && !(config.collections || []).some(function (rule) { return adapterFor(rule.network); })) {
      $("no-wallet").hidden = false;
    }
    if (config.test_mode) { say("Test mode: payments use test networks."); }
  }

  // Plain transfers: the session's own amount and reference for a network (and listing).
  var currentDeposit = null;

  async function showDeposit(network, listing) {
    say("Getting your payment instructions…");
    var response = await post("/deposit", {}, JSON.stringify({ network: network, listing: listing || "" }));
    var body = await readJson(response);
    if (!response.ok) { say("Transfers are not available now (" + (body.error || response.status) + ")."); return; }
    currentDeposit = { network: network, listing: listing || "" };
    $("deposit-amount").textContent = body.amount_display + " " + (UNITS[family(network)] || "");
    $("deposit-address").textContent = body.address;
    $("deposit-tag-line").hidden = !body.tag;
    $("deposit-tag").textContent = body.tag ? String(body.tag) : "";
    $("deposit-memo-line").hidden = !body.memo;
    $("deposit-memo").textContent = body.memo || "";
    if (typeof body.qr === "string" && body.qr.indexOf("data:image/png;base64,") === 0) {
      $("deposit-qr").src = body.qr;
    }
    var hours = Math.round((body.lookback_seconds || 7200) / 3600);
    $("deposit-lookback").textContent = hours + (hours === 1 ? " hour" : " hours");
    $("deposit").hidden = false;
    say(body.tag ? "Include the destination tag, or the transfer cannot be told apart." :
      "Send the exact amount; add the memo if your wallet allows it.");
  }

  async function checkDeposit() {
    if (!currentDeposit) { return; }
    say("Looking for your transfer…");
    var response = await post("/deposit/check", {}, JSON.stringify(currentDeposit));
    var body = await readJson(response);
    if (response.ok && body.eligible) {
      if (response.headers.get("Concert-Listing-Conflict") === "1") {
        say("Your payment arrived after the item was sold. You are in the fast lane; the merchant will contact you about the item.");
        return;
      }
      done(body);
      return;
    }
    if (response.ok) { say("Not seen on the ledger yet. Transfers take a few seconds; check again shortly."); return; }
    if (response.status === 429) {
      say("Checked a moment ago; try again in " + (response.headers.get("Retry-After") || "a few") + " seconds.");
      return;
    }
    say("The transfer could not be checked now (" + (body.error || response.status) + "). Do not pay again.");
  }

  function showDeposits() {
    var networks = config.deposit_networks || [];
    if (!networks.length) { return; }
    $("deposits").hidden = false;
    var list = $("deposit-networks");
    networks.forEach(function (network) {
      var item = document.createElement("li");
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = "Pay with a transfer (" + (UNITS[family(network)] || network) + ", " + network + ")";
      button.addEventListener("click", function () {
        showDeposit(network, "").catch(function (e) { say("Something went wrong: " + e.message); });
      });
      item.appendChild(button);
      list.appendChild(item);
    });
    $("deposit-check").addEventListener("click", function () {
      checkDeposit().catch(function (e) { say("Something went wrong: " + e.message); });
    });
  }

  async function showShop() {
    var shop = await readJson(await fetch(BASE + "/shop", { credentials: "same-origin" }));
    var listings = shop.listings || [];
    if (!listings.length) { return; }
    $("shop").hidden = false;
    var list = $("listings");
    listings.forEach(function (listing) {
      var item = document.createElement("li");
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = listing.label + " — " + listing.price_display + " " + (UNITS[family(listing.network)] || "");
      if (listing.bought) {
        button.disabled = true;
        button.textContent += " (yours)";
      } else if (listing.sold) {
        button.disabled = true;
        button.textContent += " (sold)";
      }
      button.addEventListener("click", function () {
        showDeposit(listing.network, listing.id).catch(function (e) { say("Something went wrong: " + e.message); });
      });
      item.appendChild(button);
      list.appendChild(item);
    });
  }

  async function start() {
    $("back").href = returnTarget();
    $("retry").addEventListener("click", function () {
      sendPending().catch(function (e) { say("Something went wrong: " + e.message); });
    });
    var response = await fetch(BASE + "/config", { credentials: "same-origin" });
    config = await readJson(response);
    if (!config.enabled) {
      $("summary").textContent = "The fast lane is not available on this site.";
      if (config.legacy_skip_url) { $("back").href = config.legacy_skip_url; }
      return;
    }
    showOffers();
    showDeposits();
    await startSession();
    await showShop();
    var status = await readJson(await fetch(BASE + "/status", { credentials: "same-origin" }));
    if (status.eligible) {
      say(status.kind === "nft" ? "Your NFT already lets you into the fast lane." : "You are already in the fast lane.");
    }
    if (pending()) {
      $("pending").hidden = false;
      say("A payment from earlier is waiting for its result; retrying sends the same payment.");
    }
  }

  start().catch(function (e) { say("The fast lane could not start: " + e.message); });
})();
