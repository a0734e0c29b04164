// The Settings tab: every live setting in a card per group, edited in place and saved together.
// Polling refreshes values, sources and the fixed facts, but never an input holding an unsaved
// edit. The server checks every value; this script only shows what it says.
(function () {
  "use strict";

  var portal = window.ConcertPortal;
  var panel = document.getElementById("tab-settings");
  if (!portal || !panel) return;

  var FIXED_ORDER = ["Version", "Main listener", "Portal listener", "Data directory",
    "Admission secret", "Admin token", "Portal pass", "IP details", "History log"];
  var SOURCE_BADGE = { file: "saved", flag: "flag", env: "env", default: "default" };
  var SOURCE_TITLE = {
    file: "Changed here; outranks flags and the environment",
    flag: "From the command line",
    env: "From a CONCERT_* variable",
    default: "Built in"
  };
  var PLACEHOLDER = { duration: "like 30s, 5m or 1h30m", int: "a whole number", float: "a number" };

  var groupsNav = document.getElementById("settings-groups");
  var cardsHolder = document.getElementById("settings-cards");
  var nothing = document.getElementById("settings-nothing");
  var filterInput = document.getElementById("settings-filter");
  var discardButton = document.getElementById("settings-discard");
  var saveButton = document.getElementById("settings-save");
  var saveLabel = document.getElementById("settings-save-label");
  var persistence = document.getElementById("settings-persistence");
  var fixedList = document.getElementById("settings-fixed");

  var state = {
    settings: {},   // key -> the server's view of it
    order: [],      // keys as the server lists them (group order)
    groups: [],     // group names in order
    rows: {},       // key -> its elements
    cards: {},      // group -> its card
    pills: {},      // group ("" = all) -> its pill
    edits: {},      // key -> the JSON value to send
    problems: {},   // key -> what the server said about it
    group: "",      // the group shown; "" shows all
    filter: "",
    busy: false,    // a save or reset is on its way
    changes: 0,     // saves and resets sent; a poll begun before one is stale
    persisted: false
  };

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function has(object, key) { return Object.prototype.hasOwnProperty.call(object, key); }

  function count(object) { return Object.keys(object).length; }

  // Lists travel as comma-separated text and are edited one entry per line.
  function entries(text) {
    return String(text === null || text === undefined ? "" : text)
      .split(/[,\n]/)
      .map(function (entry) { return entry.trim(); })
      .filter(function (entry) { return entry !== ""; });
  }

  function inputText(setting) {
    if (setting.list) return entries(setting.value).join("\n");
    return setting.value === null || setting.value === undefined ? "" : String(setting.value);
  }

  // What the input holds, as the JSON value to send. Text that is not a number goes as it is,
  // so the server's message says what is wrong with it.
  function inputValue(setting, input) {
    if (setting.kind === "bool") return input.checked;
    if (setting.list) return entries(input.value).join(",");
    var text = input.value.trim();
    if (setting.kind === "int" && /^-?\d+$/.test(text)) return Number(text);
    if (setting.kind === "float" && text !== "" && isFinite(Number(text))) return Number(text);
    return setting.kind === "int" || setting.kind === "float" ? text : input.value;
  }

  function sameValue(setting, value) {
    if (setting.kind === "bool") return value === setting.value;
    if (setting.list) return value === entries(setting.value).join(",");
    if (setting.kind === "int" || setting.kind === "float") {
      return typeof value === "number" && value === Number(setting.value);
    }
    return String(value).trim() === String(setting.value).trim();
  }

  function makeInput(setting) {
    var id = "setting-" + setting.key;
    var input;
    var holder;
    if (setting.kind === "bool") {
      holder = element("div", "form-check form-switch mb-0");
      input = element("input", "form-check-input");
      input.type = "checkbox";
      input.setAttribute("role", "switch");
      var onOff = element("label", "form-check-label small");
      onOff.htmlFor = id;
      holder.appendChild(input);
      holder.appendChild(onOff);
    } else if (setting.list) {
      input = element("textarea", "form-control form-control-sm font-monospace");
      input.rows = 2;
      input.placeholder = "one " + setting.list + " per line";
      holder = input;
    } else {
      input = element("input", "form-control form-control-sm");
      input.type = "text";
      if (setting.kind === "int") input.inputMode = "numeric";
      if (setting.kind === "float") input.inputMode = "decimal";
      if (PLACEHOLDER[setting.kind]) input.placeholder = PLACEHOLDER[setting.kind];
      holder = input;
    }
    input.id = id;
    input.name = setting.key;
    input.autocomplete = "off";
    input.spellcheck = false;
    input.disabled = setting.restart;
    input.addEventListener(setting.kind === "bool" ? "change" : "input", function () {
      edited(setting.key);
    });
    if (!setting.list && setting.kind !== "bool") {
      input.addEventListener("keydown", function (event) {
        if (event.key === "Enter") { event.preventDefault(); save(); }
      });
    }
    return { input: input, holder: holder };
  }

  function makeRow(setting) {
    var row = element("div", "setting-row");
    row.dataset.key = setting.key;
    var grid = element("div", "row g-2");
    var about = element("div", "col-12 col-md-7");
    var head = element("div", "d-flex flex-wrap align-items-center gap-1 mb-1");
    var label = element("label", "setting-label fw-semibold me-1", setting.label);
    label.htmlFor = "setting-" + setting.key;
    var badges = element("span", "d-inline-flex flex-wrap gap-1");
    head.appendChild(label);
    head.appendChild(badges);
    about.appendChild(head);
    about.appendChild(element("div", "setting-help small text-body-secondary", setting.help));
    about.appendChild(element("div", "setting-names small font-monospace text-body-secondary",
      setting.flag + " · " + setting.env));

    var control = element("div", "col-12 col-md-5");
    var made = makeInput(setting);
    control.appendChild(made.holder);
    var problem = element("div", "invalid-feedback d-block");
    problem.hidden = true;
    control.appendChild(problem);
    var reset = element("button", "btn btn-link btn-sm px-0 text-decoration-none setting-reset");
    reset.type = "button";
    reset.hidden = true;
    reset.title = "Remove the saved value: back to the flag, environment or built-in value";
    reset.appendChild(element("i", "bi bi-arrow-counterclockwise"));
    reset.appendChild(document.createTextNode(" Reset"));
    reset.addEventListener("click", function () { resetKey(setting.key); });
    control.appendChild(reset);

    grid.appendChild(about);
    grid.appendChild(control);
    row.appendChild(grid);
    return {
      row: row, input: made.input, badges: badges, problem: problem, reset: reset,
      search: [setting.key, setting.label, setting.help, setting.flag, setting.env]
        .join(" ").toLowerCase(),
      badgeText: ""
    };
  }

  function makePill(group, label) {
    var item = element("li", "nav-item");
    var button = element("button", "nav-link");
    button.type = "button";
    button.appendChild(document.createTextNode(label));
    var number = element("span", "count");
    var dot = element("span", "settings-dot");
    dot.title = "unsaved changes";
    dot.hidden = true;
    button.appendChild(number);
    button.appendChild(dot);
    button.addEventListener("click", function () {
      state.group = group;
      arrange();
    });
    item.appendChild(button);
    groupsNav.appendChild(item);
    state.pills[group] = { button: button, count: number, dot: dot };
  }

  // Builds the cards and pills once for the list of settings the server has.
  function build(settings) {
    cardsHolder.textContent = "";
    groupsNav.textContent = "";
    state.rows = {};
    state.cards = {};
    state.pills = {};
    state.groups = [];
    makePill("", "All");
    settings.forEach(function (setting) {
      if (!has(state.cards, setting.group)) {
        state.groups.push(setting.group);
        var card = element("div", "card settings-card");
        card.dataset.group = setting.group;
        var body = element("div", "card-body");
        var title = element("div", "settings-card-title d-flex align-items-baseline gap-2 mb-2");
        title.appendChild(element("h2", "h6 mb-0", setting.group));
        body.appendChild(title);
        card.appendChild(body);
        cardsHolder.appendChild(card);
        state.cards[setting.group] = { card: card, body: body };
        makePill(setting.group, setting.group);
      }
      var parts = makeRow(setting);
      state.rows[setting.key] = parts;
      state.cards[setting.group].body.appendChild(parts.row);
    });
  }

  function showBadges(setting, parts) {
    var text = setting.source + (setting.restart ? "+restart" : "");
    if (parts.badgeText === text) return;
    parts.badgeText = text;
    parts.badges.textContent = "";
    var source = element("span", "badge source-" + setting.source, SOURCE_BADGE[setting.source] || setting.source);
    source.title = SOURCE_TITLE[setting.source] || "";
    parts.badges.appendChild(source);
    if (setting.restart) {
      var restart = element("span", "badge source-restart", "restart");
      restart.title = "Changed only by a restart";
      parts.badges.appendChild(restart);
    }
  }

  function writeInput(setting, input) {
    if (setting.kind === "bool") {
      input.checked = setting.value === true;
    } else {
      var text = inputText(setting);
      if (input.value !== text) input.value = text;
    }
    fitInput(setting, input);
  }

  function fitInput(setting, input) {
    if (setting.kind === "bool") {
      var label = input.parentNode.querySelector(".form-check-label");
      if (label) label.textContent = input.checked ? "on" : "off";
    } else if (setting.list) {
      input.rows = Math.min(8, Math.max(2, input.value.split("\n").length + 1));
    }
  }

  function showRow(key) {
    var parts = state.rows[key];
    var setting = state.settings[key];
    if (!parts || !setting) return;
    showBadges(setting, parts);
    parts.reset.hidden = setting.source !== "file" || setting.restart || state.busy;
    parts.row.classList.toggle("is-dirty", has(state.edits, key));
    var problem = has(state.problems, key) ? state.problems[key] : "";
    parts.problem.textContent = problem;
    parts.problem.hidden = problem === "";
    parts.input.classList.toggle("is-invalid", problem !== "");
  }

  function edited(key) {
    var setting = state.settings[key];
    var parts = state.rows[key];
    if (!setting || !parts) return;
    var value = inputValue(setting, parts.input);
    if (sameValue(setting, value)) delete state.edits[key];
    else state.edits[key] = value;
    delete state.problems[key];
    fitInput(setting, parts.input);
    showRow(key);
    showToolbar();
  }

  function showToolbar() {
    var pending = count(state.edits);
    saveLabel.textContent = "Save " + pending + (pending === 1 ? " change" : " changes");
    saveButton.disabled = pending === 0 || state.busy;
    discardButton.disabled = pending === 0 || state.busy;
    var dirty = {};
    Object.keys(state.edits).forEach(function (key) {
      if (state.settings[key]) dirty[state.settings[key].group] = true;
    });
    Object.keys(state.pills).forEach(function (group) {
      state.pills[group].dot.hidden = group === "" ? pending === 0 : !dirty[group];
    });
  }

  // Shows the chosen group's card, and in every card only the rows the filter matches.
  function arrange() {
    var words = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = {};
    var total = 0;
    state.order.forEach(function (key) {
      var parts = state.rows[key];
      var group = state.settings[key].group;
      var match = words.every(function (word) {
        return parts.search.indexOf(word) >= 0 || group.toLowerCase().indexOf(word) >= 0;
      });
      parts.row.hidden = !match;
      if (match) { shown[group] = (shown[group] || 0) + 1; total += 1; }
    });
    var visibleCards = 0;
    state.groups.forEach(function (group) {
      var visible = (state.group === "" || state.group === group) && (shown[group] || 0) > 0;
      state.cards[group].card.hidden = !visible;
      if (visible) visibleCards += 1;
      state.pills[group].count.textContent = String(shown[group] || 0);
    });
    state.pills[""].count.textContent = String(total);
    Object.keys(state.pills).forEach(function (group) {
      state.pills[group].button.classList.toggle("active", group === state.group);
    });
    nothing.classList.toggle("d-none", visibleCards > 0);
  }

  function showFixed(fixed) {
    fixedList.textContent = "";
    var keys = FIXED_ORDER.filter(function (key) { return has(fixed, key); });
    Object.keys(fixed).forEach(function (key) { if (keys.indexOf(key) < 0) keys.push(key); });
    keys.forEach(function (key) {
      fixedList.appendChild(element("dt", "", key));
      fixedList.appendChild(element("dd", "", String(fixed[key])));
    });
  }

  // Takes the server's view: new values everywhere no edit is pending.
  function take(view) {
    if (!view || !Array.isArray(view.settings)) return;
    var order = view.settings.map(function (setting) { return setting.key; });
    if (order.join(",") !== state.order.join(",")) {
      state.order = order;
      build(view.settings);
    }
    state.persisted = view.persisted === true;
    view.settings.forEach(function (setting) {
      state.settings[setting.key] = setting;
      var parts = state.rows[setting.key];
      if (!has(state.edits, setting.key)) {
        writeInput(setting, parts.input);
      } else if (sameValue(setting, state.edits[setting.key])) {
        // Someone saved this very value meanwhile: nothing is left to save.
        delete state.edits[setting.key];
      }
      showRow(setting.key);
    });
    persistence.textContent = state.persisted
      ? "Changes apply at once and are kept in " + view.file + "."
      : "No data directory: changes apply at once but end with a restart.";
    showFixed(view.fixed || {});
    showToolbar();
    arrange();
  }

  // Puts the server's problems beside their fields. A problem found in the settings as a whole
  // has no key; it goes to each sent field it names.
  function showProblems(answer, sent) {
    state.problems = {};
    var problems = answer && Array.isArray(answer.problems) ? answer.problems : [];
    problems.forEach(function (problem) {
      if (state.rows[problem.key]) state.problems[problem.key] = problem.message;
    });
    var error = answer && answer.error ? String(answer.error) : "";
    if (problems.length === 0 && error) {
      sent.forEach(function (key) {
        var setting = state.settings[key];
        var names = [key, setting.flag, setting.env];
        var named = names.some(function (name) {
          var escaped = name.replace(/[-\/\\^$*+?.()|[\]{}]/g, "\\$&");
          return new RegExp("(^|[^\\w-])" + escaped + "([^\\w-]|$)").test(error);
        });
        if (named) state.problems[key] = error;
      });
    }
    Object.keys(state.rows).forEach(showRow);
  }

  function busy(on) {
    state.busy = on;
    if (on) state.changes += 1;
    Object.keys(state.rows).forEach(showRow);
    showToolbar();
  }

  function save() {
    var keys = Object.keys(state.edits);
    if (keys.length === 0 || state.busy) return;
    var sent = {};
    keys.forEach(function (key) { sent[key] = state.edits[key]; });
    busy(true);
    portal.sendJSON("POST", "/api/settings", sent).then(function (answer) {
      if (answer.ok) {
        // Only what was sent is settled; an edit made while the save was on its way stays.
        keys.forEach(function (key) {
          if (has(state.edits, key) && JSON.stringify(state.edits[key]) === JSON.stringify(sent[key])) {
            delete state.edits[key];
          }
          delete state.problems[key];
        });
        state.busy = false;
        take(answer.body);
        var saved = keys.length === 1 ? "1 change" : keys.length + " changes";
        portal.toast(state.persisted ? "Saved " + saved + "." : "Applied " + saved + " until the next restart.");
      } else {
        busy(false);
        showProblems(answer.body, keys);
        portal.toast(answer.body && answer.body.error ? answer.body.error : "Not saved (" + answer.status + ").", true);
      }
    }).catch(function () {
      busy(false);
      portal.toast("Not saved: the portal did not answer.", true);
    });
  }

  function resetKey(key) {
    var setting = state.settings[key];
    if (!setting || state.busy) return;
    busy(true);
    portal.sendJSON("DELETE", "/api/settings?key=" + encodeURIComponent(key)).then(function (answer) {
      if (answer.ok) {
        delete state.edits[key];
        delete state.problems[key];
        state.busy = false;
        take(answer.body);
        var now = state.settings[key];
        portal.toast(setting.label + " is back to its " + (now ? SOURCE_BADGE[now.source] : "previous") + " value.");
      } else {
        busy(false);
        state.problems[key] = answer.body && answer.body.error ? answer.body.error : "Not reset (" + answer.status + ").";
        showRow(key);
        portal.toast(state.problems[key], true);
      }
    }).catch(function () {
      busy(false);
      portal.toast("Not reset: the portal did not answer.", true);
    });
  }

  function discard() {
    var keys = Object.keys(state.edits);
    state.edits = {};
    keys.forEach(function (key) {
      delete state.problems[key];
      var setting = state.settings[key];
      if (setting && state.rows[key]) writeInput(setting, state.rows[key].input);
      showRow(key);
    });
    showToolbar();
  }

  function refresh() {
    if (state.busy) return;
    var asked = state.changes;
    portal.getJSON("/api/settings").then(function (view) {
      // A save or reset answered meanwhile with newer values than this poll's.
      if (!state.busy && asked === state.changes) take(view);
    }).catch(function () { /* next round */ });
  }

  filterInput.addEventListener("input", function () {
    state.filter = filterInput.value;
    if (state.order.length) arrange();
  });
  saveButton.addEventListener("click", save);
  discardButton.addEventListener("click", discard);
  // Leaving with unsaved edits asks first.
  window.addEventListener("beforeunload", function (event) {
    if (count(state.edits) > 0) {
      event.preventDefault();
      event.returnValue = "";
    }
  });

  portal.tab("settings", { refresh: refresh });
})();
