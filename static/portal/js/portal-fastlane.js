// The Fast lane tab: health, capacity, receipts by state and the latest ones (sales can be
// marked delivered), and an editor for fastlane.json and networks.json with a dry run and a
// save that swaps the running lane. Polling refreshes the figures every round but never
// replaces text being edited. The server checks everything; this script shows what it says.
(function () {
  "use strict";

  var portal = window.ConcertPortal;
  var panel = document.getElementById("tab-fastlane");
  if (!portal || !panel) return;

  var health = document.getElementById("fastlane-health");
  var offAlert = document.getElementById("fastlane-off");
  var offersBody = document.getElementById("fastlane-offers");
  var receiptsBody = document.getElementById("fastlane-receipts");
  var receiptsSummary = document.getElementById("fastlane-receipts-summary");
  var fileState = document.getElementById("fastlane-file-state");
  var problemsBox = document.getElementById("fastlane-problems");
  var problemsTitle = document.getElementById("fastlane-problems-title");
  var problemList = document.getElementById("fastlane-problem-list");
  var verdict = document.getElementById("fastlane-verdict");
  var docs = {
    fastlane: document.getElementById("fastlane-doc-fastlane"),
    networks: document.getElementById("fastlane-doc-networks")
  };
  var paths = {
    fastlane: document.getElementById("fastlane-path-fastlane"),
    networks: document.getElementById("fastlane-path-networks")
  };
  var dryRunButton = document.getElementById("fastlane-dry-run");
  var saveButton = document.getElementById("fastlane-save");
  var reloadButton = document.getElementById("fastlane-reload");

  var state = {
    edited: false,   // the text areas hold edits not yet saved
    busy: false,     // a dry run or save is on its way
    writable: true,
    lastHealth: "",
    lastOffers: "",
    lastReceipts: ""
  };

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function set(key, text) {
    panel.querySelectorAll('[data-fastlane="' + key + '"]').forEach(function (node) {
      if (node.textContent !== text) node.textContent = text;
    });
  }

  function count(value) {
    if (value === null || value === undefined) return "—";
    return Number(value).toLocaleString();
  }

  function short(text, keep) {
    text = String(text || "");
    if (text.length <= keep * 2 + 1) return text;
    return text.slice(0, keep) + "…" + text.slice(-keep);
  }

  // Amounts travel in the asset's smallest unit; say which, rather than suggest whole coins.
  var UNITS = { XRP: "drops", SOL: "lamports" };
  function amount(value, asset) {
    return value + " " + (UNITS[asset] || "atomic " + asset);
  }

  function seconds(value) {
    var s = Number(value) || 0;
    if (s < 60) return s + " s";
    if (s % 60 === 0) return s / 60 + " min";
    return Math.floor(s / 60) + " min " + (s % 60) + " s";
  }

  function healthItem(name, ok, detail) {
    var item = element("div", "health-item " + (ok ? "health-ok" : "health-bad"));
    var icon = element("i", "bi " + (ok ? "bi-check-circle-fill" : "bi-exclamation-triangle-fill"));
    icon.setAttribute("aria-hidden", "true");
    var text = element("div");
    text.appendChild(element("div", "health-name", name));
    text.appendChild(element("div", "health-detail", detail));
    item.appendChild(icon);
    item.appendChild(text);
    return item;
  }

  function renderHealth(view) {
    var items;
    if (!view.enabled) {
      items = [["Fast lane", false, "off: no enabled fastlane.json is running"]];
    } else {
      items = [
        ["Receipt journal", view.journal_healthy, view.journal_healthy ? "writing " + view.journal : "a write failed: payments stopped until a restart"],
        ["Settlement journal", view.gateway_healthy, view.gateway_healthy ? "open" : "closed or failed: no settle is taken"],
        ["Mode", !view.test_mode, view.test_mode ? "test mode: test networks only" : "live: real payments"],
        ["Screening", view.screening, view.screening ? "payers screened by " + (view.config.policy_url || "the policy service") : "off: payers are not screened (test mode without policy_url)"]
      ];
      if (view.reloading) items.push(["Reload", false, "a new configuration is being applied; wallet requests wait"]);
    }
    var key = JSON.stringify(items);
    if (key === state.lastHealth) return;
    state.lastHealth = key;
    health.textContent = "";
    items.forEach(function (item) { health.appendChild(healthItem(item[0], item[1], item[2])); });
  }

  function setBar(name, used, limit) {
    var bar = panel.querySelector('[data-fastlane-bar="' + name + '"]');
    if (!bar) return;
    var share = limit > 0 ? Math.min(1, used / limit) : 0;
    bar.style.width = (share * 100).toFixed(1) + "%";
    bar.classList.toggle("level-warn", share >= 0.7 && share < 0.9);
    bar.classList.toggle("level-high", share >= 0.9);
  }

  function renderOffers(view) {
    var offers = (view.enabled && view.config && view.config.offers) || [];
    var key = JSON.stringify(offers);
    if (key === state.lastOffers) return;
    state.lastOffers = key;
    offersBody.textContent = "";
    if (offers.length === 0) {
      var none = element("tr");
      var cell = element("td", "text-body-secondary", view.enabled ? "No offers." : "The fast lane is off.");
      cell.colSpan = 4;
      none.appendChild(cell);
      offersBody.appendChild(none);
      return;
    }
    offers.forEach(function (offer) {
      var row = element("tr");
      row.dataset.offer = offer.network;
      var label = element("td", null, offer.label);
      if (offer.deposit_only) label.appendChild(element("span", "badge text-bg-secondary ms-1", "deposits"));
      row.appendChild(label);
      row.appendChild(element("td", "font-monospace", offer.network));
      row.appendChild(element("td", "font-monospace", amount(offer.amount, offer.asset)));
      var payTo = element("td", "font-monospace cell-clip text-truncate", offer.pay_to);
      payTo.title = offer.pay_to;
      row.appendChild(payTo);
      offersBody.appendChild(row);
    });
  }

  var STATE_BADGE = { settled: "text-bg-success", pending: "text-bg-info", unknown: "text-bg-warning" };

  function timeCell(ms, className) {
    var cell = element("td");
    if (ms === null || ms === undefined) {
      cell.textContent = "—";
      return cell;
    }
    var time = element("span", className);
    time.dataset.ms = String(ms);
    time.title = new Date(ms).toLocaleString();
    cell.appendChild(time);
    return cell;
  }

  function receiptRow(receipt) {
    var row = element("tr");
    row.dataset.key = receipt.fingerprint;
    var payment = element("td", "font-monospace");
    var fp = element("button", "btn btn-link btn-sm p-0 font-monospace", short(receipt.fingerprint, 6));
    fp.type = "button";
    fp.title = "Copy " + receipt.fingerprint;
    fp.dataset.copy = receipt.fingerprint;
    payment.appendChild(fp);
    if (receipt.transaction) {
      payment.appendChild(element("div", "small text-body-secondary", "tx " + short(receipt.transaction, 6)));
    }
    row.appendChild(payment);
    row.appendChild(element("td", null, receipt.kind.replace(/_/g, " ")));
    var stateCell = element("td");
    var label = receipt.state === "unknown" ? "unresolved" : receipt.state;
    stateCell.appendChild(element("span", "badge " + (STATE_BADGE[receipt.state] || "text-bg-secondary"), label));
    if (receipt.live) stateCell.appendChild(element("span", "badge row-chip row-chip-new", "pass running"));
    row.appendChild(stateCell);
    row.appendChild(element("td", "font-monospace", receipt.network));
    var payer = element("td", "font-monospace", short(receipt.payer, 6));
    payer.title = receipt.payer;
    row.appendChild(payer);
    row.appendChild(element("td", "font-monospace", amount(receipt.amount, receipt.asset)));
    row.appendChild(timeCell(receipt.started, "js-ago"));
    row.appendChild(timeCell(receipt.expires, receipt.live ? "js-left" : "js-time"));
    var delivery = element("td", "text-end");
    if (receipt.sale) {
      if (receipt.delivered) {
        delivery.appendChild(element("span", "badge text-bg-success", "delivered"));
      } else {
        var mark = element("button", "btn btn-sm btn-outline-light", "Mark delivered");
        mark.type = "button";
        mark.dataset.action = "delivered";
        mark.dataset.fingerprint = receipt.fingerprint;
        mark.disabled = receipt.state !== "settled";
        delivery.appendChild(mark);
      }
    } else {
      delivery.appendChild(element("span", "text-body-secondary", "—"));
    }
    row.appendChild(delivery);
    return row;
  }

  function renderReceipts(view) {
    var receipts = [];
    var seen = {};
    // Sales first among equals: a sale older than the last 50 receipts is still listed.
    ((view.enabled && view.receipts) || []).concat((view.enabled && view.sales) || []).forEach(function (receipt) {
      if (seen[receipt.fingerprint]) return;
      seen[receipt.fingerprint] = true;
      receipts.push(receipt);
    });
    var key = JSON.stringify(receipts);
    if (key === state.lastReceipts) return;
    state.lastReceipts = key;
    receiptsBody.textContent = "";
    if (receipts.length === 0) {
      var none = element("tr");
      var cell = element("td", "text-body-secondary", view.enabled ? "No receipts yet." : "The fast lane is off.");
      cell.colSpan = 9;
      none.appendChild(cell);
      receiptsBody.appendChild(none);
    } else {
      receipts.forEach(function (receipt) { receiptsBody.appendChild(receiptRow(receipt)); });
    }
    receiptsSummary.textContent = view.enabled
      ? receipts.length + " shown of " + count(view.receipts_total) + " · " + count(view.sales_total) + " sales"
      : "";
  }

  function render(view) {
    offAlert.hidden = !!view.enabled;
    renderHealth(view);
    var capacity = view.capacity || {};
    var states = view.states || {};
    set("in_flight", count(capacity.in_flight));
    set("max_in_flight", count(capacity.max_in_flight));
    set("settling", count(capacity.settling));
    set("max_settling", count(capacity.max_settling));
    set("settled", count(states.settled));
    set("pending", count(states.pending));
    set("unknown", count(states.unknown));
    set("receipts_total", count(view.receipts_total));
    var config = view.config || {};
    set("merchant", config.merchant || "—");
    set("origin", config.origin || "—");
    set("pass_seconds", config.pass_seconds ? seconds(config.pass_seconds) : "—");
    setBar("in_flight/max_in_flight", Number(capacity.in_flight) || 0, Number(capacity.max_in_flight) || 0);
    setBar("settling/max_settling", Number(capacity.settling) || 0, Number(capacity.max_settling) || 0);
    renderOffers(view);
    renderReceipts(view);
  }

  function showFileState(config) {
    var text;
    var className;
    if (config.reloading) { text = "applying…"; className = "text-bg-info"; }
    else if (state.edited) { text = "edited, not saved"; className = "text-bg-warning"; }
    else if (!config.saved) { text = "not saved yet"; className = "text-bg-secondary"; }
    else if (config.in_sync && config.running) { text = "saved · running"; className = "text-bg-success"; }
    else if (config.in_sync) { text = "saved · lane off"; className = "text-bg-secondary"; }
    else { text = "saved · not what runs"; className = "text-bg-warning"; }
    fileState.textContent = text;
    fileState.className = "badge " + className;
    fileState.dataset.state = text;
  }

  var lastConfig = null;

  function loadConfig(force) {
    return portal.getJSON("/api/fastlane/config").then(function (config) {
      lastConfig = config;
      state.writable = !!config.writable;
      paths.fastlane.textContent = config.fastlane_path || "";
      paths.networks.textContent = config.networks_path || "";
      if (force || !state.edited) {
        ["fastlane", "networks"].forEach(function (name) {
          if (docs[name].value !== config[name]) docs[name].value = config[name];
        });
        state.edited = false;
      }
      saveButton.disabled = state.busy || !state.writable;
      dryRunButton.disabled = state.busy;
      showFileState(config);
    });
  }

  function refresh() {
    portal.getJSON("/api/fastlane").then(render).catch(function () { /* next round */ });
    loadConfig(false).catch(function () { /* next round */ });
  }

  function clearVerdict() {
    problemsBox.hidden = true;
    verdict.hidden = true;
    problemList.textContent = "";
    docs.fastlane.classList.remove("is-invalid");
    docs.networks.classList.remove("is-invalid");
  }

  function showProblems(title, problems) {
    problemsTitle.textContent = title;
    problemList.textContent = "";
    problems.forEach(function (problem) { problemList.appendChild(element("li", null, problem)); });
    problemsBox.hidden = false;
    verdict.hidden = true;
    // Point at the file each problem names.
    ["fastlane", "networks"].forEach(function (name) {
      var named = problems.some(function (problem) {
        var path = paths[name].textContent;
        return (path && problem.indexOf(path) === 0) || problem.indexOf(name + ".json") !== -1;
      });
      docs[name].classList.toggle("is-invalid", named);
    });
  }

  function showVerdict(text) {
    problemsBox.hidden = true;
    verdict.textContent = text;
    verdict.hidden = false;
  }

  function describeChanges(changes) {
    return (changes || []).map(function (change) {
      return change.label + " (" + change.network + ") now pays " + change.to + " instead of " + change.from;
    });
  }

  function send(dryRun) {
    if (state.busy) return;
    state.busy = true;
    dryRunButton.disabled = true;
    saveButton.disabled = true;
    clearVerdict();
    var body = { fastlane: docs.fastlane.value, networks: docs.networks.value, dry_run: dryRun };
    portal.sendJSON("POST", "/api/fastlane/config", body).then(function (answer) {
      var result = answer.body || {};
      if (answer.ok) {
        var changes = describeChanges(result.pay_to_changes);
        if (dryRun) {
          showVerdict("Both files are valid: " + result.offers + " offer(s)." + (changes.length ? " Receiving address change: " + changes.join("; ") + "." : "") + " Nothing was saved.");
          portal.toast("Dry run: both files are valid", false);
        } else {
          state.edited = false;
          showVerdict("Saved. " + (result.running ? "The lane now sells " + result.offers + " offer(s)." : "The fast lane is off.") + (changes.length ? " Receiving address change: " + changes.join("; ") + "." : ""));
          portal.toast("Fast lane saved and applied", false);
        }
      } else {
        var problems = result.problems && result.problems.length ? result.problems : [result.error || ("the server answered " + answer.status)];
        var title = dryRun ? "Dry run found problems (nothing saved):" : "Not saved:";
        if (result.restored === false) title = "The fast lane is off:";
        showProblems(title, problems);
        portal.toast(dryRun ? "Dry run: problems found" : "Fast lane not saved", true);
      }
    }).catch(function () {
      showProblems("Not sent:", ["the portal did not answer; try again"]);
    }).then(function () {
      state.busy = false;
      dryRunButton.disabled = false;
      saveButton.disabled = !state.writable;
      if (!dryRun) refresh();
      else if (lastConfig) showFileState(lastConfig);
    });
  }

  ["fastlane", "networks"].forEach(function (name) {
    docs[name].addEventListener("input", function () {
      state.edited = true;
      docs[name].classList.remove("is-invalid");
      if (lastConfig) showFileState(lastConfig);
    });
  });
  dryRunButton.addEventListener("click", function () { send(true); });
  saveButton.addEventListener("click", function () { send(false); });
  reloadButton.addEventListener("click", function () {
    clearVerdict();
    loadConfig(true).catch(function () { /* next round */ });
  });

  receiptsBody.addEventListener("click", function (event) {
    var button = event.target.closest('[data-action="delivered"]');
    if (!button) return;
    button.disabled = true;
    portal.sendJSON("POST", "/api/fastlane/sales/delivered", { fingerprint: button.dataset.fingerprint })
      .then(function (answer) {
        if (answer.ok) portal.toast("Marked delivered", false);
        else portal.toast((answer.body && answer.body.error) || "Not marked", true);
        refresh();
      })
      .catch(function () { button.disabled = false; });
  });

  portal.tab("fastlane", { refresh: refresh });
})();
