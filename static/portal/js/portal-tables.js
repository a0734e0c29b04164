// The portal's paged tables: rows rendered by the server arrive as HTML inside JSON and are
// swapped in by key (rows that did not change stay as they are), with a pager, a page size
// kept per table, a filter, a pause while the pointer is over the table, times shown in the
// browser's own zone and counted down locally, and click-to-copy for addresses.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal) return;

  function pad(number) { return number < 10 ? "0" + number : String(number); }

  // 45s, 3m 7s, 2h 5m (below two days), 3d 4h.
  function span(ms) {
    var seconds = Math.max(0, Math.round(ms / 1000));
    if (seconds < 60) return seconds + "s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m " + (seconds % 60) + "s";
    var hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + "h " + (minutes % 60) + "m";
    return Math.floor(hours / 24) + "d " + (hours % 24) + "h";
  }

  function clockTime(ms) {
    var date = new Date(ms);
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
  }

  // The server's clock minus this browser's, from the last fragment, so countdowns agree.
  var skew = 0;

  function tickTimes(root) {
    var now = Date.now() + skew;
    (root || document).querySelectorAll("[data-ms]").forEach(function (element) {
      var ms = Number(element.dataset.ms);
      var text = null;
      if (element.classList.contains("js-time")) text = clockTime(ms);
      else if (element.classList.contains("js-left")) text = span(ms - now);
      else if (element.classList.contains("js-ago")) text = span(now - ms) + " ago";
      else if (element.classList.contains("js-since")) text = span(now - ms);
      if (text !== null && element.textContent !== text) element.textContent = text;
    });
  }
  window.setInterval(function () { tickTimes(); }, 1000);

  document.addEventListener("click", function (event) {
    var copy = event.target.closest("[data-copy]");
    if (!copy) return;
    var text = copy.dataset.copy;
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(
        function () { portal.toast("Copied " + text); },
        function () { portal.toast("Could not copy " + text, true); }
      );
    }
  });

  // Puts the rows of `html` into `body`, keeping the element of every row whose markup did
  // not change (and anything the operator had open in it).
  function swapRows(body, html) {
    var incoming = document.createElement("tbody");
    incoming.innerHTML = html;
    var kept = {};
    Array.prototype.forEach.call(body.children, function (row) {
      if (row.dataset.key !== undefined) kept[row.dataset.key] = row;
    });
    var fresh = [];
    Array.prototype.forEach.call(incoming.children, function (row) {
      var old = kept[row.dataset.key];
      fresh.push(old && old.outerHTML === row.outerHTML ? old : row);
    });
    while (body.firstChild) body.removeChild(body.firstChild);
    fresh.forEach(function (row) { body.appendChild(row); });
    tickTimes(body);
  }

  portal.table = function (name, url) {
    var table = document.querySelector('[data-table="' + name + '"]');
    if (!table) return null;
    var body = table.querySelector("tbody");
    var pager = document.querySelector('[data-table-pager="' + name + '"]');
    var summary = document.querySelector('[data-table-summary="' + name + '"]');
    var filter = document.querySelector('[data-table-filter="' + name + '"]');
    var sizeKey = "concert.portal.size." + name;
    var state = { page: 1, pages: 1, size: 25, q: "", hovering: false, lastHtml: null };
    try { state.size = Number(localStorage.getItem(sizeKey)) || 25; } catch (e) { /* private mode */ }

    var sizeSelect = pager && pager.querySelector("[data-page-size]");
    if (sizeSelect) {
      sizeSelect.value = String(state.size);
      sizeSelect.addEventListener("change", function () {
        state.size = Number(sizeSelect.value) || 25;
        try { localStorage.setItem(sizeKey, String(state.size)); } catch (e) { /* private mode */ }
        state.page = 1;
        load(true);
      });
    }
    if (pager) {
      pager.querySelectorAll("[data-page]").forEach(function (button) {
        button.addEventListener("click", function () {
          var to = { first: 1, prev: state.page - 1, next: state.page + 1, last: state.pages }[button.dataset.page];
          state.page = Math.min(Math.max(1, to), state.pages);
          load(true);
        });
      });
    }
    var typing = null;
    if (filter) {
      filter.addEventListener("input", function () {
        window.clearTimeout(typing);
        typing = window.setTimeout(function () {
          state.q = filter.value.trim();
          state.page = 1;
          load(true);
        }, 250);
      });
    }
    table.addEventListener("mouseenter", function () { state.hovering = true; showPaused(); });
    table.addEventListener("mouseleave", function () { state.hovering = false; showPaused(); });
    function showPaused() {
      var note = pager && pager.querySelector("[data-paused]");
      if (note) note.hidden = !state.hovering;
    }

    function load(asked) {
      if (state.hovering && !asked) return Promise.resolve();
      var query = "?page=" + state.page + "&size=" + state.size + "&q=" + encodeURIComponent(state.q);
      return portal.getJSON(url + query).then(function (fragment) {
        skew = fragment.now - Date.now();
        state.page = fragment.page;
        state.pages = fragment.pages;
        if (fragment.html !== state.lastHtml) {
          state.lastHtml = fragment.html;
          swapRows(body, fragment.html);
        }
        if (summary) summary.textContent = fragment.summary;
        var pageText = pager && pager.querySelector("[data-page-text]");
        if (pageText) pageText.textContent = "Page " + fragment.page + " of " + fragment.pages;
        var flags = fragment.flags || {};
        document.querySelectorAll("[data-flag-alert]").forEach(function (alert) {
          if (!table.closest("[data-tab-panel]").contains(alert)) return;
          var flag = alert.dataset.flagAlert;
          alert.classList.toggle("d-none", !(flag in flags) || flags[flag] !== false);
        });
      }).catch(function () { /* the next round tries again */ });
    }

    return { refresh: function () { return load(false); }, reload: function () { return load(true); }, element: table };
  };
})();
