// The portal's paged tables: rows rendered by the server arrive as HTML inside JSON and are
// swapped in by key (rows that did not change stay as they are), with a pager, a page size
// kept per table, a filter, a Live switch, a pause while the pointer is over the table, chips
// on rows that arrived or left, buttons that ask for a second click, times shown in the
// browser's own zone and counted down locally, and click-to-copy for addresses.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  if (!portal) return;

  // How long a "new" chip stays, and how long a row that left stays to say where it went.
  var NEW_CHIP_MS = 4000;
  var LEAVING_MS = 3000;
  // How long a button waits for its confirming second click.
  var CONFIRM_MS = 6000;
  var DEFAULT_SIZE = 25;

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

  // Copying without the clipboard API (absent outside a secure context, such as plain HTTP to
  // an address other than loopback): select the text in a scratch field and copy that.
  function copyBySelection(text) {
    var scratch = document.createElement("textarea");
    scratch.value = text;
    scratch.setAttribute("readonly", "");
    scratch.className = "copy-scratch";
    var focused = document.activeElement;
    document.body.appendChild(scratch);
    scratch.select();
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    scratch.remove();
    if (focused && focused.focus) focused.focus();
    return copied;
  }

  function copyText(text) {
    if (navigator.clipboard && navigator.clipboard.writeText) {
      return navigator.clipboard.writeText(text).then(
        function () { return true; },
        function () { return copyBySelection(text); }
      );
    }
    return Promise.resolve(copyBySelection(text));
  }

  document.addEventListener("click", function (event) {
    var copy = event.target.closest("[data-copy]");
    if (!copy) return;
    var text = copy.dataset.copy;
    copyText(text).then(function (copied) {
      if (copied) portal.toast("Copied " + text);
      else portal.toast("Could not copy " + text, true);
    });
  });

  function storedItem(key) {
    try { return localStorage.getItem(key); } catch (e) { return null; }
  }

  function storeItem(key, value) {
    try { localStorage.setItem(key, value); } catch (e) { /* private mode */ }
  }

  function rowsOf(body) {
    return Array.prototype.filter.call(body.children, function (row) {
      return row.dataset.key !== undefined && !row.classList.contains("row-leaving");
    });
  }

  // The cell a row's chip goes in: the first one that is not a detail toggle.
  function chipCell(row) {
    return row.querySelector("td:not(.row-toggle-cell)") || row.firstElementChild;
  }

  function addChip(row, text, kind) {
    var cell = chipCell(row);
    if (!cell || cell.querySelector(".row-chip")) return;
    var chip = document.createElement("span");
    chip.className = "badge rounded-pill row-chip row-chip-" + kind;
    chip.textContent = text;
    cell.appendChild(chip);
  }

  // A table of server-rendered rows. Rows whose markup did not change keep their element (and
  // whatever the operator had open in it). A row with `data-detail` (a fragment URL) and an
  // `[data-action="expand"]` button opens a detail row beneath it, fetched again only when its
  // row's markup changes. `options.params()` adds to each request's query; `options.gone` is
  // the chip of a row that left the table altogether ("gone" unless given).
  portal.table = function (name, url, options) {
    options = options || {};
    var table = document.querySelector('[data-table="' + name + '"]');
    if (!table) return null;
    var body = table.querySelector("tbody");
    var goneText = options.gone || "gone";
    // The server's markup of each row shown, by key: rows are compared with this, since the
    // elements themselves change as times tick and details open.
    var markup = {};
    // Open details by row key: {url, page, row, cell}.
    var open = {};
    // Rows that left, shown a moment longer with a chip, by key: {row, index, timer}.
    var leaving = {};
    // Rows that arrived, by key: the timer that takes their chip away.
    var arrived = {};
    // A button waiting for its second click, by row key: {action, timer}. Kept by key, since
    // the row may be replaced between the two clicks (a visitor's poll changes its row).
    var pending = {};

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

    // Confirmation: an outline button turns solid and says what a second click does.
    function armButton(button) {
      if (button.classList.contains("confirming")) return;
      button.dataset.icon = button.innerHTML;
      button.classList.add("confirming");
      Array.prototype.slice.call(button.classList).forEach(function (name) {
        if (name.indexOf("btn-outline-") === 0) {
          button.classList.replace(name, "btn-" + name.slice("btn-outline-".length));
          button.dataset.outline = name;
        }
      });
      button.textContent = button.dataset.confirm;
    }

    function disarmButton(button) {
      if (!button.classList.contains("confirming")) return;
      button.classList.remove("confirming");
      if (button.dataset.outline) {
        button.classList.replace("btn-" + button.dataset.outline.slice("btn-outline-".length), button.dataset.outline);
        delete button.dataset.outline;
      }
      button.innerHTML = button.dataset.icon || "";
      delete button.dataset.icon;
    }

    function rowByKey(key) {
      return rowsOf(body).find(function (row) { return row.dataset.key === key; }) || null;
    }

    function pendingButton(key) {
      var waiting = pending[key];
      var row = waiting && rowByKey(key);
      return row ? row.querySelector('[data-action="' + waiting.action + '"][data-confirm]') : null;
    }

    function forget(key) {
      var waiting = pending[key];
      if (!waiting) return;
      window.clearTimeout(waiting.timer);
      var button = pendingButton(key);
      if (button) disarmButton(button);
      delete pending[key];
    }

    function arm(key, button) {
      forget(key);
      var row = rowByKey(key);
      if (row) row.querySelectorAll("[data-confirm].confirming").forEach(disarmButton);
      pending[key] = {
        action: button.dataset.action,
        timer: window.setTimeout(function () { forget(key); }, CONFIRM_MS)
      };
      armButton(button);
    }

    // The first click on a `[data-confirm]` button arms it; only the second reaches the tab's
    // own handler (registered after this one).
    table.addEventListener("click", function (event) {
      var button = event.target.closest("[data-confirm]");
      if (!button || button.disabled) return;
      var row = button.closest("tr[data-key]");
      if (!row) return;
      var key = row.dataset.key;
      var waiting = pending[key];
      if (waiting && waiting.action === button.dataset.action && button.classList.contains("confirming")) {
        window.clearTimeout(waiting.timer);
        delete pending[key];
        return;
      }
      event.stopImmediatePropagation();
      arm(key, button);
    });

    function leave(key, row, index, chip) {
      row.classList.add("row-leaving");
      row.querySelectorAll("button, input, select").forEach(function (control) { control.disabled = true; });
      addChip(row, chip, "left");
      leaving[key] = {
        row: row,
        index: index,
        timer: window.setTimeout(function () {
          if (leaving[key] && leaving[key].row === row) delete leaving[key];
          row.remove();
        }, LEAVING_MS)
      };
    }

    function stopLeaving(key) {
      var gone = leaving[key];
      if (!gone) return;
      window.clearTimeout(gone.timer);
      gone.row.remove();
      delete leaving[key];
    }

    function markArrived(key) {
      window.clearTimeout(arrived[key]);
      arrived[key] = window.setTimeout(function () {
        delete arrived[key];
        var row = rowByKey(key);
        var chip = row && row.querySelector(".row-chip-new");
        if (chip) chip.remove();
        if (row) row.classList.remove("row-arrived");
      }, NEW_CHIP_MS);
    }

    // Where a row that left went, from the fragment's `where`: another page, or out of the
    // table; null when not known (then it just goes).
    function departure(where, key, page) {
      if (!where || !(key in where)) return null;
      var now = Number(where[key]);
      if (now === 0) return goneText;
      if (now > page) return "↓ page " + now;
      if (now < page) return "↑ page " + now;
      return null;
    }

    // Puts the rows of `html` into the body: unchanged rows stay, changed ones are replaced,
    // and open details follow their rows (refetched when the row changed, closed when it left
    // the page). With `where` (a refresh of the same view), rows that arrived get a "new" chip
    // and rows that left stay a moment with a chip saying where they went.
    function swapRows(html, where, page) {
      var incoming = document.createElement("tbody");
      incoming.innerHTML = html;
      var shown = {};
      var shownOrder = [];
      rowsOf(body).forEach(function (row) {
        shown[row.dataset.key] = row;
        shownOrder.push(row.dataset.key);
      });
      var nextMarkup = {};
      var placed = [];
      Array.prototype.forEach.call(incoming.children, function (row) {
        var key = row.dataset.key;
        var server = row.outerHTML;
        nextMarkup[key] = server;
        var same = shown[key] !== undefined && markup[key] === server;
        placed.push({ key: key, row: same ? shown[key] : row, changed: !same, arrived: !(key in markup) });
      });
      if (where) {
        shownOrder.forEach(function (key, index) {
          if (key in nextMarkup) return;
          var chip = departure(where, key, page);
          if (chip) leave(key, shown[key], index, chip);
        });
      }
      markup = nextMarkup;
      while (body.firstChild) body.removeChild(body.firstChild);
      placed.forEach(function (item) {
        stopLeaving(item.key);
        body.appendChild(item.row);
        if (where && item.arrived) markArrived(item.key);
        if (arrived[item.key]) {
          item.row.classList.add("row-arrived");
          addChip(item.row, "new", "new");
        }
        var waiting = pending[item.key];
        var button = waiting && item.row.querySelector('[data-action="' + waiting.action + '"][data-confirm]');
        if (button && !button.disabled) armButton(button);
        var detail = open[item.key];
        if (!detail) return;
        markExpanded(item.row, true);
        body.appendChild(detail.row);
        if (item.changed) {
          detail.url = item.row.dataset.detail || detail.url;
          loadDetail(item.key);
        }
      });
      Object.keys(leaving).sort(function (a, b) { return leaving[a].index - leaving[b].index; }).forEach(function (key) {
        var gone = leaving[key];
        body.insertBefore(gone.row, body.children[gone.index] || null);
      });
      Object.keys(open).forEach(function (key) {
        if (!(key in nextMarkup)) delete open[key];
      });
      Object.keys(pending).forEach(function (key) {
        if (!(key in nextMarkup)) forget(key);
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
    var liveKey = "concert.portal.live." + name;
    var state = {
      page: 1, pages: 1, size: DEFAULT_SIZE, q: "", hovering: false, live: true,
      lastHtml: null, lastQuery: null, loaded: false, asking: 0
    };

    var sizeSelect = pager && pager.querySelector("[data-page-size]");
    // The sizes offered are the select's options; a stored size that is not one of them (an
    // older choice, a hand edit) falls back to the default.
    function offeredSize(value) {
      var size = Number(value);
      if (!sizeSelect) return size > 0 ? size : DEFAULT_SIZE;
      var offered = Array.prototype.some.call(sizeSelect.options, function (option) {
        return Number(option.value) === size;
      });
      return offered ? size : DEFAULT_SIZE;
    }
    state.size = offeredSize(storedItem(sizeKey));
    if (sizeSelect) {
      sizeSelect.value = String(state.size);
      sizeSelect.addEventListener("change", function () {
        state.size = offeredSize(sizeSelect.value);
        storeItem(sizeKey, String(state.size));
        state.page = 1;
        load(true);
      });
    }
    var pageButtons = pager ? pager.querySelectorAll("[data-page]") : [];
    pageButtons.forEach(function (button) {
      button.addEventListener("click", function () {
        var to = { first: 1, prev: state.page - 1, next: state.page + 1, last: state.pages }[button.dataset.page];
        state.page = Math.min(Math.max(1, to), state.pages);
        load(true);
      });
    });
    function showPage() {
      var pageText = pager && pager.querySelector("[data-page-text]");
      if (pageText) pageText.textContent = "Page " + state.page + " of " + state.pages;
      pageButtons.forEach(function (button) {
        var back = button.dataset.page === "first" || button.dataset.page === "prev";
        button.disabled = back ? state.page <= 1 : state.page >= state.pages;
      });
    }
    showPage();

    var liveSwitch = pager && pager.querySelector("[data-live]");
    state.live = storedItem(liveKey) !== "false";
    if (liveSwitch) {
      liveSwitch.checked = state.live;
      liveSwitch.addEventListener("change", function () {
        state.live = liveSwitch.checked;
        storeItem(liveKey, state.live ? "true" : "false");
        if (state.live) load(false);
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
    // Only a mouse (or pen) hovers: a tap on a touch screen would pause the table until the
    // next tap elsewhere, and its rows would stop changing unnoticed.
    table.addEventListener("pointerenter", function (event) {
      if (event.pointerType === "touch") return;
      state.hovering = true;
      showPaused();
    });
    table.addEventListener("pointerleave", function () { state.hovering = false; showPaused(); });
    function showPaused() {
      var note = pager && pager.querySelector("[data-paused]");
      if (note) note.hidden = !state.hovering;
    }

    function viewQuery() {
      return "?page=" + state.page + "&size=" + state.size + "&q=" + encodeURIComponent(state.q) +
        (options.params ? options.params() : "");
    }

    // `asked`: the operator asked (a page, a filter, an action), so it loads even while paused.
    function load(asked) {
      if (!asked && (state.hovering || !state.live)) return Promise.resolve();
      var query = viewQuery();
      // Only a refresh of the view already shown tells arrivals and departures apart from
      // the operator's own paging and filtering.
      var sameView = state.loaded && query === state.lastQuery;
      var keys = sameView ? Object.keys(markup) : [];
      var asking = ++state.asking;
      var keysQuery = keys.length ? "&keys=" + keys.map(encodeURIComponent).join(",") : "";
      return portal.getJSON(url + query + keysQuery).then(function (fragment) {
        // A later request answers for the view now wanted.
        if (asking !== state.asking) return;
        skew = fragment.now - Date.now();
        var marking = sameView && fragment.page === state.page;
        state.page = fragment.page;
        state.pages = fragment.pages;
        state.loaded = true;
        state.lastQuery = viewQuery();
        if (fragment.html !== state.lastHtml) {
          state.lastHtml = fragment.html;
          swapRows(fragment.html, marking ? (fragment.where || {}) : null, fragment.page);
        }
        if (summary) summary.textContent = fragment.summary;
        showPage();
        var flags = fragment.flags || {};
        document.querySelectorAll("[data-flag-alert]").forEach(function (alert) {
          if (!table.closest("[data-tab-panel]").contains(alert)) return;
          var flag = alert.dataset.flagAlert;
          alert.classList.toggle("d-none", !(flag in flags) || flags[flag] !== false);
        });
      }).catch(function () { /* the next round tries again */ });
    }

    return {
      // The 3-second round: skipped while paused or not live.
      refresh: function () { return load(false); },
      reload: function () { return load(true); },
      // When the tab opens: a table that is not live still shows its rows once.
      shown: function () { if (!state.loaded && !state.live) load(true); },
      // After the filter changed: back to the first page.
      restart: function () { state.page = 1; return load(true); },
      element: table
    };
  };
})();
