// The Ban log tab: every ban window, newest first, each one's panel under its row.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal || !portal.table) return;
  var table = portal.table("banlog", "/api/frag/banlog");
  if (!table) return;

  document.addEventListener("concert:banned", function () {
    if (portal.isActive("banlog")) table.reload();
  });

  portal.tab("banlog", { refresh: table.refresh, shown: table.shown });
})();
