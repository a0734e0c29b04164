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
  portal.serverNow = function () { return Date.now() + skew; };

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

  // A table of server-rendered rows. Rows whose markup did not change keep their element (and
  // whatever the operator had open in it). A row with `data-detail` (a fragment URL) and an
  // `[data-action="expand"]` button opens a detail row beneath it, fetched again only when its
  // row's markup changes. `options.params()` adds to each request's query.
  portal.table = function (name, url, options) {
    options = options || {};
    var table = document.querySelector('[data-table="' + name + '"]');
    if (!table) return null;
    var body = table.querySelector("tbody");
    // The server's markup of each row shown, by key: rows are compared with this, since the
    // elements themselves change as times tick and details open.
    var markup = {};
    // Open details by row key: {url, page, row, cell}.
    var open = {};

    function columns() { return table.querySelectorAll("thead th").length || 1; }

    function markExpanded(row, expanded) {
      var toggle = row.querySelector('[data-action="expand"]');
      if (!toggle) return;
      toggle.classList.toggle("expanded", expanded);
      toggle.setAttribute("aria-expanded", expanded ? "true" : "false");
    }

    function loadDetail(key) {
      var detail = open[key];
      if (!detail) return Promise.resolve();
      var separator = detail.url.indexOf("?") < 0 ? "?" : "&";
      return portal.getJSON(detail.url + separator + "page=" + detail.page).then(function (fragment) {
        if (open[key] !== detail) return;
        detail.cell.innerHTML = fragment.html;
        tickTimes(detail.row);
      }).catch(function (error) {
        if (open[key] !== detail) return;
        var gone = /: 404$/.test(String(error && error.message));
        detail.cell.textContent = gone ? "This is no longer in the history." : "Could not load the details; trying again with the next refresh.";
      });
    }

    function openDetail(row) {
      var key = row.dataset.key;
      var detailRow = document.createElement("tr");
      detailRow.className = "detail-row";
      detailRow.dataset.detailFor = key;
      var cell = document.createElement("td");
      cell.colSpan = columns();
      cell.className = "detail-cell";
      cell.textContent = "Loading…";
      detailRow.appendChild(cell);
      row.parentNode.insertBefore(detailRow, row.nextSibling);
      open[key] = { url: row.dataset.detail, page: 1, row: detailRow, cell: cell };
      markExpanded(row, true);
      return loadDetail(key);
    }

    function closeDetail(row) {
      var detail = open[row.dataset.key];
      if (detail) detail.row.remove();
      delete open[row.dataset.key];
      markExpanded(row, false);
    }

    // Puts the rows of `html` into the body: unchanged rows stay, changed ones are replaced,
    // and open details follow their rows (refetched when the row changed, closed when it left
    // the page).
    function swapRows(html) {
      var incoming = document.createElement("tbody");
      incoming.innerHTML = html;
      var shown = {};
      Array.prototype.forEach.call(body.children, function (row) {
        if (row.dataset.key !== undefined) shown[row.dataset.key] = row;
      });
      var nextMarkup = {};
      var placed = [];
      Array.prototype.forEach.call(incoming.children, function (row) {
        var key = row.dataset.key;
        var server = row.outerHTML;
        nextMarkup[key] = server;
        var same = shown[key] !== undefined && markup[key] === server;
        placed.push({ key: key, row: same ? shown[key] : row, changed: !same });
      });
      markup = nextMarkup;
      while (body.firstChild) body.removeChild(body.firstChild);
      placed.forEach(function (item) {
        body.appendChild(item.row);
        var detail = open[item.key];
        if (!detail) return;
        markExpanded(item.row, true);
        body.appendChild(detail.row);
        if (item.changed) {
          detail.url = item.row.dataset.detail || detail.url;
          loadDetail(item.key);
        }
      });
      Object.keys(open).forEach(function (key) {
        if (!(key in nextMarkup)) delete open[key];
      });
      tickTimes(body);
    }

    table.addEventListener("click", function (event) {
      var toggle = event.target.closest('[data-action="expand"]');
      if (toggle) {
        var row = toggle.closest("tr[data-key]");
        if (!row || !row.dataset.detail) return;
        if (open[row.dataset.key]) closeDetail(row);
        else openDetail(row);
        return;
      }
      var turn = event.target.closest("[data-detail-page]");
      if (turn) {
        var detailRow = turn.closest("tr.detail-row");
        var detail = detailRow && open[detailRow.dataset.detailFor];
        if (!detail) return;
        detail.page = Math.max(1, Number(turn.dataset.detailPage) || 1);
        loadDetail(detailRow.dataset.detailFor);
      }
    });
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
      var query = "?page=" + state.page + "&size=" + state.size + "&q=" + encodeURIComponent(state.q) +
        (options.params ? options.params() : "");
      return portal.getJSON(url + query).then(function (fragment) {
        skew = fragment.now - Date.now();
        state.page = fragment.page;
        state.pages = fragment.pages;
        if (fragment.html !== state.lastHtml) {
          state.lastHtml = fragment.html;
          swapRows(fragment.html);
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

    return {
      refresh: function () { return load(false); },
      reload: function () { return load(true); },
      // After the filter changed: back to the first page.
      restart: function () { state.page = 1; return load(true); },
      element: table
    };
  };
})();
