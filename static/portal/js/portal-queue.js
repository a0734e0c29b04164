// The Queue tab: the front of the line, moving a visitor to the front, removing one (and
// banning its address). Removing takes a second click on the same button (the table asks for
// it), even if the visitor's row changed in between.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal || !portal.table) return;
  var table = portal.table("queue", "/api/frag/queue", { gone: "left the line" });
  if (!table) return;

  table.element.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button || button.disabled) return;
    if (button.dataset.action === "promote") {
      button.disabled = true;
      portal.sendJSON("POST", "/api/queue/promote", { id: button.dataset.id }).then(function (answer) {
        if (answer.ok) portal.toast("Moved to the front of the line");
        else portal.toast(answer.body.error || "could not move the visitor", true);
        table.reload();
      });
    } else if (button.dataset.action === "kick" || button.dataset.action === "kick-ban") {
      var ban = button.dataset.action === "kick-ban";
      button.disabled = true;
      portal.sendJSON("POST", "/api/queue/kick", { id: button.dataset.id, ban: ban }).then(function (answer) {
        if (answer.ok) portal.toast(ban ? "Removed from the line and banned" : "Removed from the line");
        else portal.toast(answer.body.error || "could not remove the visitor", true);
        table.reload();
      });
    }
  });

  portal.tab("queue", { refresh: table.refresh, shown: table.shown });
})();
