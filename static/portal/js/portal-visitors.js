// The Visitors tab: the clients the request history remembers, a switch for the ones that
// are or were banned, each client's detail under its row, and banning a client through the
// Bans tab's dialog.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal || !portal.table) return;
  var flagged = document.querySelector('[data-table-flagged="visitors"]');
  var table = portal.table("visitors", "/api/frag/visitors", {
    params: function () { return flagged && flagged.checked ? "&flagged=1" : ""; }
  });
  if (!table) return;

  if (flagged) flagged.addEventListener("change", function () { table.restart(); });

  table.element.addEventListener("click", function (event) {
    var button = event.target.closest('[data-action="ban"]');
    if (!button || button.disabled || !portal.openBanDialog) return;
    portal.openBanDialog(button.dataset.client);
  });

  document.addEventListener("concert:banned", function () {
    if (portal.isActive("visitors")) table.reload();
  });

  portal.tab("visitors", { refresh: table.refresh, shown: table.shown });
})();
