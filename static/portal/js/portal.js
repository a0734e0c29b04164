// The portal's script: theme switch, the Overview's figures every 3 s and its charts every
// sample. Loaded by every portal page; it does nothing where its elements are absent.
(function () {
  "use strict";

  var THEME_KEY = "concert.portal.theme";
  var REFRESH_MS = 3000;

  function applyTheme(theme) {
    var sheet = document.getElementById("theme-sheet");
    if (!sheet) return;
    var light = theme === "light";
    sheet.setAttribute("href", light ? sheet.dataset.light : sheet.dataset.dark);
    document.documentElement.setAttribute("data-bs-theme", light ? "light" : "dark");
  }

  function storedTheme() {
    try { return localStorage.getItem(THEME_KEY) || "dark"; } catch (e) { return "dark"; }
  }

  applyTheme(storedTheme());

  var toggle = document.getElementById("theme-toggle");
  if (toggle) {
    toggle.addEventListener("click", function () {
      var next = storedTheme() === "light" ? "dark" : "light";
      try { localStorage.setItem(THEME_KEY, next); } catch (e) { /* private mode */ }
      applyTheme(next);
      redrawCharts();
    });
  }

  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  if (!csrfMeta) return; // the sign-in page
  var csrfToken = csrfMeta.getAttribute("content");

  // A 401 means the session ended (signed out elsewhere, expired): show the sign-in page.
  function checked(response) {
    if (response.status === 401) {
      window.location.reload();
      throw new Error("signed out");
    }
    return response;
  }

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(checked)
      .then(function (response) {
        if (!response.ok) throw new Error(url + ": " + response.status);
        return response.json();
      });
  }

  // Sends a change; resolves to {ok, status, body} so callers can show the server's problems.
  function sendJSON(method, url, body) {
    var options = {
      method: method,
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRF-Token": csrfToken }
    };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    return fetch(url, options).then(checked).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (parsed) {
        return { ok: response.ok, status: response.status, body: parsed };
      });
    });
  }

  // Tabs: each panel [data-tab-panel] has a button [data-tab]; the open one is in the URL's
  // hash, so a reload keeps it. Scripts of other tabs register with ConcertPortal.tab().
  var tabs = {};
  var activeTab = "overview";

  function showTab(name) {
    if (!document.querySelector('[data-tab-panel="' + name + '"]')) name = "overview";
    activeTab = name;
    document.querySelectorAll("[data-tab-panel]").forEach(function (panel) {
      panel.hidden = panel.dataset.tabPanel !== name;
    });
    document.querySelectorAll("[data-tab]").forEach(function (button) {
      button.classList.toggle("active", button.dataset.tab === name);
    });
    if (tabs[name] && tabs[name].shown) tabs[name].shown();
    if (tabs[name] && tabs[name].refresh) tabs[name].refresh();
  }

  document.querySelectorAll("[data-tab]").forEach(function (button) {
    button.addEventListener("click", function () {
      if (window.location.hash !== "#" + button.dataset.tab) {
        history.replaceState(null, "", "#" + button.dataset.tab);
      }
      showTab(button.dataset.tab);
    });
  });

  function toast(message, problem) {
    var holder = document.getElementById("toasts");
    if (!holder) return;
    var item = document.createElement("div");
    item.className = "toast show align-items-center border-0 " + (problem ? "text-bg-danger" : "text-bg-success");
    item.setAttribute("role", "status");
    var body = document.createElement("div");
    body.className = "toast-body";
    body.textContent = message;
    item.appendChild(body);
    holder.appendChild(item);
    window.setTimeout(function () { item.remove(); }, problem ? 8000 : 4000);
  }

  window.ConcertPortal = {
    getJSON: getJSON,
    sendJSON: sendJSON,
    toast: toast,
    tab: function (name, handlers) {
      tabs[name] = handlers;
      if (name === activeTab) showTab(name);
    },
    isActive: function (name) { return activeTab === name; }
  };

  function formatValue(value) {
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (typeof value === "number" && !Number.isInteger(value)) return value.toFixed(2);
    if (value === null || value === undefined || value === "") return "—";
    return String(value);
  }

  function fillStats(stats) {
    document.querySelectorAll("[data-stat]").forEach(function (element) {
      var key = element.dataset.stat;
      if (!(key in stats)) return;
      var text = formatValue(stats[key]);
      if (key === "active_bans" && stats.abuse_enabled === false) text = "off";
      if (element.textContent !== text) element.textContent = text;
    });
    document.querySelectorAll("[data-bar]").forEach(function (bar) {
      var parts = bar.dataset.bar.split("/");
      var used = Number(stats[parts[0]]) || 0;
      var limit = Number(stats[parts[1]]) || 0;
      var share = limit > 0 ? Math.min(1, used / limit) : 0;
      bar.style.width = (share * 100).toFixed(1) + "%";
      bar.classList.toggle("level-warn", share >= 0.7 && share < 0.9);
      bar.classList.toggle("level-high", share >= 0.9);
    });
    var updated = document.getElementById("updated");
    if (updated) updated.textContent = new Date().toLocaleTimeString();
  }

  // Charts: one uPlot per [data-chart], fed from /api/series.
  // Each series is named by its sample's field.
  var series = { t: [] };
  var lastSample = 0;
  var charts = [];
  var CHARTS = {
    queue: { lines: [["Waiting", "queue_depth", "#ff71c7"]] },
    occupancy: { lines: [["Occupancy", "occupancy", "#4fa3d9"], ["Cap", "cap", "#9b59d0"]] },
    rates: { lines: [["Admissions/s", "admissions", "#4fa3d9"], ["Origin failures/s", "origin_failures", "#e05555"]] },
    latency: { lines: [["p50 ms", "origin_p50_ms", "#4fa3d9"], ["p95 ms", "origin_p95_ms", "#f0ad4e"], ["p99 ms", "origin_p99_ms", "#e05555"]] },
    statuses: { lines: [["2xx/s", "answers_2xx", "#3fb950"], ["3xx/s", "answers_3xx", "#4fa3d9"], ["4xx/s", "answers_4xx", "#f0ad4e"], ["5xx/s", "answers_5xx", "#e05555"]] }
  };
  Object.keys(CHARTS).forEach(function (kind) {
    CHARTS[kind].lines.forEach(function (line) { series[line[1]] = []; });
  });

  function chartData(kind) {
    var data = [series.t];
    CHARTS[kind].lines.forEach(function (line) { data.push(series[line[1]]); });
    return data;
  }

  function makeChart(element) {
    var kind = element.dataset.chart;
    if (!CHARTS[kind] || typeof uPlot === "undefined") return null;
    var axisColor = storedTheme() === "light" ? "#4a4560" : "#cfc8e8";
    var gridColor = storedTheme() === "light" ? "#e3e6ee" : "rgba(255,255,255,0.08)";
    var options = {
      width: Math.max(200, element.clientWidth),
      height: 180,
      legend: { show: true },
      axes: [
        { stroke: axisColor, grid: { stroke: gridColor } },
        { stroke: axisColor, grid: { stroke: gridColor } }
      ],
      series: [{}].concat(CHARTS[kind].lines.map(function (line) {
        return { label: line[0], stroke: line[2], width: 2 };
      }))
    };
    return { element: element, kind: kind, plot: new uPlot(options, chartData(kind), element) };
  }

  // How many points each chart holds per line, by chart: what an operator (or a test) can
  // check the charts were given.
  window.ConcertPortal.chartPoints = function () {
    var points = {};
    charts.forEach(function (chart) {
      points[chart.kind] = chart.plot.data.slice(1).map(function (line) {
        return line.filter(function (value) { return value !== null && value !== undefined; }).length;
      });
    });
    return points;
  };

  function redrawCharts() {
    charts.forEach(function (chart) { chart.plot.destroy(); chart.element.textContent = ""; });
    charts = [];
    document.querySelectorAll("[data-chart]").forEach(function (element) {
      var chart = makeChart(element);
      if (chart) charts.push(chart);
    });
  }

  function addSamples(samples) {
    samples.forEach(function (sample) {
      Object.keys(series).forEach(function (key) {
        // A missing figure (no origin answers in that interval) is a gap, not a zero.
        series[key].push(key in sample ? sample[key] : null);
      });
      lastSample = sample.t;
    });
    var HOUR = 720;
    Object.keys(series).forEach(function (key) {
      if (series[key].length > HOUR) series[key].splice(0, series[key].length - HOUR);
    });
    charts.forEach(function (chart) { chart.plot.setData(chartData(chart.kind)); });
  }

  function refresh() {
    if (document.hidden) return;
    getJSON("/api/overview").then(fillStats).catch(function () { /* next round */ });
    getJSON("/api/series?since=" + lastSample)
      .then(function (answer) { addSamples(answer.samples || []); })
      .catch(function () { /* next round */ });
    var tab = tabs[activeTab];
    if (tab && tab.refresh) tab.refresh();
  }

  function fitCharts() {
    charts.forEach(function (chart) {
      chart.plot.setSize({ width: Math.max(200, chart.element.clientWidth), height: 180 });
    });
  }
  tabs.overview = { shown: fitCharts };

  redrawCharts();
  showTab((window.location.hash || "#overview").slice(1));
  refresh();
  window.setInterval(refresh, REFRESH_MS);
  window.addEventListener("resize", fitCharts);
})();
