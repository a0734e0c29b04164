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

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload();
          throw new Error("signed out");
        }
        if (!response.ok) throw new Error(url + ": " + response.status);
        return response.json();
      });
  }

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
  var series = { t: [], queue: [], occupancy: [], cap: [], admissions: [], failures: [] };
  var lastSample = 0;
  var charts = [];
  var CHARTS = {
    queue: { lines: [["Waiting", "queue", "#ff71c7"]] },
    occupancy: { lines: [["Occupancy", "occupancy", "#4fa3d9"], ["Cap", "cap", "#9b59d0"]] },
    rates: { lines: [["Admissions/s", "admissions", "#4fa3d9"], ["Origin failures/s", "failures", "#e05555"]] }
  };

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
      series.t.push(sample.t);
      series.queue.push(sample.queue_depth);
      series.occupancy.push(sample.occupancy);
      series.cap.push(sample.cap);
      series.admissions.push(sample.admissions);
      series.failures.push(sample.origin_failures);
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
  }

  redrawCharts();
  refresh();
  window.setInterval(refresh, REFRESH_MS);
  window.addEventListener("resize", function () {
    charts.forEach(function (chart) {
      chart.plot.setSize({ width: Math.max(200, chart.element.clientWidth), height: 180 });
    });
  });
})();
