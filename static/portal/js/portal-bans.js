// The Bans tab: the table of bans, and the dialog that bans, changes and lifts them.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal || !portal.table) return;
  var table = portal.table("bans", "/api/frag/bans", { gone: "ended" });
  if (!table) return;

  var dialogElement = document.getElementById("ban-dialog");
  var dialog = dialogElement && window.bootstrap ? new window.bootstrap.Modal(dialogElement) : null;
  var form = document.getElementById("ban-form");
  var client = document.getElementById("ban-client");
  var permanent = document.getElementById("ban-permanent");
  var duration = document.getElementById("ban-duration");
  var problem = document.getElementById("ban-problem");
  var title = document.getElementById("ban-dialog-title");
  var submit = document.getElementById("ban-submit");

  // Bootstrap ignores hide() while the dialog is still opening; a quick submit would leave it
  // open, so hiding waits for the opening to finish.
  var opened = false;
  if (dialogElement) {
    dialogElement.addEventListener("shown.bs.modal", function () { opened = true; });
    dialogElement.addEventListener("hidden.bs.modal", function () { opened = false; });
  }
  function close() {
    if (!dialog) return;
    if (opened) { dialog.hide(); return; }
    dialogElement.addEventListener("shown.bs.modal", function () { dialog.hide(); }, { once: true });
  }

  function showProblem(text) {
    problem.textContent = text || "";
    problem.classList.toggle("d-none", !text);
  }

  function syncPermanent() { duration.disabled = permanent.checked; }
  permanent.addEventListener("change", syncPermanent);

  // The whole minutes a ban has left, rounded up: what changing it starts from.
  function minutesLeft(until) {
    var left = until - (portal.serverNow ? portal.serverNow() : Date.now());
    return left > 0 ? Math.ceil(left / 60000) : 60;
  }

  function open(editing) {
    showProblem("");
    if (editing) {
      title.textContent = "Change ban";
      submit.textContent = "Change";
      client.value = editing.client;
      client.readOnly = true;
      permanent.checked = editing.permanent === "true";
      duration.value = editing.permanent === "true" ? "1h" : minutesLeft(editing.until) + "m";
    } else {
      title.textContent = "Ban a client";
      submit.textContent = "Ban";
      client.value = "";
      client.readOnly = false;
      permanent.checked = false;
      duration.value = "1h";
    }
    syncPermanent();
    if (dialog) dialog.show();
    window.setTimeout(function () { (editing ? duration : client).focus(); }, 200);
  }

  document.querySelectorAll("[data-preset]").forEach(function (button) {
    button.addEventListener("click", function () {
      permanent.checked = false;
      syncPermanent();
      duration.value = button.dataset.preset;
    });
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var body = { client: client.value.trim(), duration: duration.value.trim(), permanent: permanent.checked };
    submit.disabled = true;
    portal.sendJSON("POST", "/api/bans", body).then(function (answer) {
      submit.disabled = false;
      if (!answer.ok) {
        showProblem(answer.body.error || ("refused (" + answer.status + ")"));
        return;
      }
      close();
      var dropped = answer.body.dropped ? " · " + answer.body.dropped + " removed from the line" : "";
      portal.toast("Banned " + answer.body.client + (answer.body.permanent ? " permanently" : "") + dropped);
      table.reload();
      // Other tabs that show bans (Visitors, Ban log) refresh too.
      document.dispatchEvent(new CustomEvent("concert:banned", { detail: answer.body }));
    }).catch(function () { submit.disabled = false; });
  });

  document.querySelector('[data-action="new-ban"]').addEventListener("click", function () { open(null); });

  // Other tabs ban through the same dialog, with the address filled in.
  portal.openBanDialog = function (address) {
    open(null);
    client.value = address || "";
    window.setTimeout(function () { duration.focus(); }, 200);
  };

  // Lifting a ban takes a second click on the same button (the table asks for it).
  table.element.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button || button.disabled) return;
    if (button.dataset.action === "edit") {
      open({ client: button.dataset.client, permanent: button.dataset.permanent, until: Number(button.dataset.until) });
      return;
    }
    if (button.dataset.action !== "unban") return;
    var target = button.dataset.client;
    button.disabled = true;
    portal.sendJSON("DELETE", "/api/bans?client=" + encodeURIComponent(target)).then(function (answer) {
      if (answer.ok) portal.toast("Lifted the ban on " + target);
      else portal.toast(answer.body.error || "could not lift the ban", true);
      table.reload();
    });
  });

  portal.tab("bans", { refresh: table.refresh, shown: table.shown });
})();
