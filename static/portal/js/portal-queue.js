// The Queue tab: the front of the line, moving a visitor to the front, banning its address.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal || !portal.table) return;
  var table = portal.table("queue", "/api/frag/queue");
  if (!table) return;

  table.element.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button) return;
    if (button.dataset.action === "promote") {
      button.disabled = true;
      portal.sendJSON("POST", "/api/queue/promote", { id: button.dataset.id }).then(function (answer) {
        if (answer.ok) portal.toast("Moved to the front of the line");
        else portal.toast(answer.body.error || "could not move the visitor", true);
        table.reload();
      });
    } else if (button.dataset.action === "ban-visitor" && portal.openBan) {
      portal.openBan(button.dataset.client);
    }
  });

  portal.tab("queue", { refresh: table.refresh });
})();
