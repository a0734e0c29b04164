// The Monitor tab: health verdicts, figures with their last ten minutes as sparklines, and the
// latency histogram, from /api/monitor every 5 s while the tab is open and the page visible.
// With -cluster, the Cluster card too, from /api/cluster in the same rhythm.
(function () {
  "use strict";
  var portal = window.ConcertPortal;
  var panel = document.getElementById("tab-monitor");
  if (!portal || !panel) return;
  // Only on the page with -cluster.
  var clusterCard = document.getElementById("monitor-cluster");

  var EVERY_MS = 5000;
  var timer = null;
  var sparks = {};
  var lastHealth = "";

  // Each card's sparkline: the sample fields it draws, with their colours.
  var SPARKS = {
    rps: [["rps", "#4fa3d9"]],
    latency: [["p50_ms", "#4fa3d9"], ["p95_ms", "#ff71c7"]],
    errors: [["errors_per_s", "#e05555"]],
    inflight: [["inflight", "#9b59d0"]],
    memory: [["rss_mb", "#4fa3d9"]],
    cpu: [["cpu_pct", "#ff71c7"]],
    threads: [["threads", "#9b59d0"]],
    queue: [["queue_depth", "#ff71c7"], ["occupancy", "#4fa3d9"]]
  };

  function set(selector, text) {
    panel.querySelectorAll(selector).forEach(function (element) {
      if (element.textContent !== text) element.textContent = text;
    });
  }

  function ms(value) {
    if (value === null || value === undefined) return "—";
    if (value < 10) return value.toFixed(1) + " ms";
    if (value < 1000) return Math.round(value) + " ms";
    return (value / 1000).toFixed(2) + " s";
  }

  function rate(value) {
    if (value === null || value === undefined) return "—";
    return value < 10 ? value.toFixed(1) : String(Math.round(value));
  }

  function megabytes(value) {
    if (value === null || value === undefined) return "—";
    return value >= 1024 ? (value / 1024).toFixed(2) + " GB" : value.toFixed(1) + " MB";
  }

  function count(value) {
    if (value === null || value === undefined) return "—";
    return Number(value).toLocaleString();
  }

  function span(seconds) {
    var s = Math.floor(seconds);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 48 * 3600) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function renderHealth(health) {
    var key = JSON.stringify(health);
    if (key === lastHealth) return;
    lastHealth = key;
    var holder = document.getElementById("monitor-health");
    holder.textContent = "";
    health.forEach(function (entry) {
      var item = document.createElement("div");
      item.className = "health-item " + (entry.ok ? "health-ok" : "health-bad");
      item.dataset.health = entry.name;
      var icon = document.createElement("i");
      icon.className = "bi " + (entry.ok ? "bi-check-circle-fill" : "bi-exclamation-triangle-fill");
      icon.setAttribute("aria-hidden", "true");
      var text = document.createElement("div");
      text.className = "health-text";
      var name = document.createElement("div");
      name.className = "health-name";
      name.textContent = entry.name + (entry.ok ? "" : " · needs a look");
      var detail = document.createElement("div");
      detail.className = "health-detail";
      detail.textContent = entry.detail;
      text.appendChild(name);
      text.appendChild(detail);
      item.appendChild(icon);
      item.appendChild(text);
      holder.appendChild(item);
    });
  }

  function renderCards(answer) {
    var latest = answer.samples.length ? answer.samples[answer.samples.length - 1] : null;
    var traffic = answer.traffic;
    var process = answer.process;
    var memory = answer.memory;
    set('[data-monitor="rps"]', latest ? rate(latest.rps) : "—");
    set('[data-monitor="latency"]', latest ? ms(latest.p50_ms) + " / " + ms(latest.p95_ms) : "—");
    set('[data-monitor="errors"]', latest ? rate(latest.errors_per_s) : "—");
    set('[data-monitor="inflight"]', count(traffic.inflight));
    set('[data-monitor="inflight_note"]', "peak " + count(traffic.inflight_peak));
    set('[data-monitor="memory"]', megabytes(memory.rss_mb));
    set('[data-monitor="cpu"]', process.cpu_pct === null || process.cpu_pct === undefined ? "—" : process.cpu_pct.toFixed(1) + " %");
    set('[data-monitor="threads"]', count(process.threads));
    set('[data-monitor="queue"]', count(traffic.queue_depth));
    set('[data-monitor="queue_note"]', "waiting · " + count(traffic.occupancy) + " of " + count(traffic.cap) + " slots in use");
    set('[data-monitor="total_p50"]', ms(traffic.p50_ms));
    set('[data-monitor="total_p95"]', ms(traffic.p95_ms));
    set('[data-monitor="total_p99"]', ms(traffic.p99_ms));
    panel.querySelector('[data-card="errors"]').classList.toggle("card-alert", !!latest && latest.errors_per_s > 0);

    var status = traffic.status;
    set('[data-process="version"]', process.version);
    set('[data-process="uptime"]', span(process.uptime_seconds));
    set('[data-process="workers"]', count(process.workers));
    set('[data-process="connections"]', count(process.connections));
    set('[data-process="files"]', count(process.open_fds) + (process.fd_limit ? " of " + count(process.fd_limit) : ""));
    set('[data-process="cpu_seconds"]', process.cpu_seconds === null ? "—" : process.cpu_seconds.toFixed(1) + " s");
    set('[data-process="rss_peak"]', megabytes(memory.rss_peak_mb));
    set('[data-process="virtual"]', megabytes(memory.virtual_mb));
    set('[data-process="requests_total"]', count(traffic.requests_total));
    set('[data-process="status_low"]', [status["1xx"], status["2xx"], status["3xx"]].map(count).join(" / "));
    set('[data-process="status_high"]', [status["4xx"], status["5xx"]].map(count).join(" / "));
    set('[data-process="history"]', answer.history.status);
  }

  // The histogram: one column per bucket, as tall as its share of the fullest bucket.
  function renderHistogram(traffic) {
    var holder = document.getElementById("monitor-histogram");
    var buckets = traffic.buckets;
    // Upper edges: milliseconds, seconds from 1000 on; the last column is the slower rest.
    var labels = traffic.bounds_ms.map(function (bound) {
      return bound >= 1000 ? bound / 1000 + "s" : String(bound);
    });
    labels.push(">" + traffic.bounds_ms[traffic.bounds_ms.length - 1] / 1000 + "s");
    if (holder.children.length !== buckets.length) {
      holder.textContent = "";
      buckets.forEach(function (_, index) {
        var column = document.createElement("div");
        column.className = "histogram-column";
        var number = document.createElement("div");
        number.className = "histogram-count";
        var track = document.createElement("div");
        track.className = "histogram-track";
        var bar = document.createElement("div");
        bar.className = "histogram-bar";
        track.appendChild(bar);
        var label = document.createElement("div");
        label.className = "histogram-label";
        label.textContent = labels[index];
        column.appendChild(number);
        column.appendChild(track);
        column.appendChild(label);
        holder.appendChild(column);
      });
    }
    var most = Math.max.apply(null, buckets.concat([1]));
    buckets.forEach(function (value, index) {
      var column = holder.children[index];
      var number = column.querySelector(".histogram-count");
      var text = value ? count(value) : "";
      if (number.textContent !== text) number.textContent = text;
      var range = index < traffic.bounds_ms.length ? "up to " + ms(traffic.bounds_ms[index]) : "over " + ms(traffic.bounds_ms[index - 1]);
      column.title = range + ": " + count(value);
      var bar = column.querySelector(".histogram-bar");
      bar.style.height = (value ? Math.max(2, (value / most) * 100) : 0).toFixed(1) + "%";
      bar.dataset.count = String(value);
    });
  }

  function sparkData(samples, fields) {
    var data = [samples.map(function (sample) { return sample.t; })];
    fields.forEach(function (field) {
      data.push(samples.map(function (sample) {
        var value = sample[field[0]];
        return value === undefined ? null : value;
      }));
    });
    return data;
  }

  function renderSparks(samples) {
    if (typeof uPlot === "undefined") return;
    panel.querySelectorAll("[data-spark]").forEach(function (element) {
      var kind = element.dataset.spark;
      var fields = SPARKS[kind];
      if (!fields) return;
      var data = sparkData(samples, fields);
      var width = element.clientWidth;
      if (sparks[kind]) {
        sparks[kind].setData(data);
        return;
      }
      if (width === 0) return; // hidden: drawn once the tab shows
      var options = {
        width: width,
        height: 44,
        cursor: { show: false },
        legend: { show: false },
        select: { show: false },
        axes: [{ show: false }, { show: false }],
        // From zero, with a little room below so a line at zero still shows.
        scales: { x: { time: true }, y: { range: function (u, min, max) {
          var top = max > 0 ? max * 1.1 : 1;
          return [Math.min(0, min || 0) - top * 0.05, top];
        } } },
        // uPlot marks the points itself while they are few (a fresh start has one sample).
        series: [{}].concat(fields.map(function (field) {
          return { stroke: field[1], width: 1.5, spanGaps: true };
        }))
      };
      sparks[kind] = new uPlot(options, data, element);
    });
  }

  function fitSparks() {
    panel.querySelectorAll("[data-spark]").forEach(function (element) {
      var plot = sparks[element.dataset.spark];
      if (plot && element.clientWidth > 0) plot.setSize({ width: element.clientWidth, height: 44 });
    });
  }

  function render(answer) {
    renderHealth(answer.health || []);
    renderCards(answer);
    renderHistogram(answer.traffic);
    renderSparks(answer.samples || []);
    panel.dataset.loaded = "true";
  }

  // The Cluster card: this instance's mode and Redis figures, and each instance's lease.
  function ago(milliseconds) {
    if (milliseconds === null || milliseconds === undefined) return "—";
    if (milliseconds < 1000) return "just now";
    if (milliseconds < 60000) return (milliseconds / 1000).toFixed(1) + " s ago";
    return span(milliseconds / 1000) + " ago";
  }

  function cell(column, text, className) {
    var td = document.createElement("td");
    td.dataset.col = column;
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }

  function shareCell(lease, cap) {
    var td = document.createElement("td");
    td.dataset.col = "share";
    var holder = document.createElement("div");
    holder.className = "cluster-share";
    var share = lease !== null && lease !== undefined && cap > 0 ? Math.min(1, lease / cap) : null;
    var track = document.createElement("div");
    track.className = "progress";
    track.setAttribute("role", "progressbar");
    track.setAttribute("aria-label", "Share of the cap held");
    var bar = document.createElement("div");
    bar.className = "progress-bar";
    bar.style.width = ((share || 0) * 100).toFixed(1) + "%";
    track.appendChild(bar);
    var text = document.createElement("span");
    text.className = "cluster-share-text";
    text.textContent = share === null ? "—" : Math.round(share * 100) + " %";
    holder.appendChild(track);
    holder.appendChild(text);
    td.appendChild(holder);
    return td;
  }

  function memberRow(member, cap, stale) {
    var row = document.createElement("tr");
    row.dataset.instance = member.id;
    if (stale) row.className = "cluster-stale";
    var name = document.createElement("td");
    name.dataset.col = "id";
    var id = document.createElement("span");
    id.className = "cluster-id";
    id.textContent = member.id;
    name.appendChild(id);
    if (member.this) {
      row.dataset.this = "true";
      var chip = document.createElement("span");
      chip.className = "badge rounded-pill cluster-this";
      chip.textContent = "this one";
      name.appendChild(chip);
    }
    row.appendChild(name);
    // The share first: on a phone it is what shows before the table scrolls.
    row.appendChild(shareCell(member.lease, cap));
    row.appendChild(cell("lease", count(member.lease)));
    row.appendChild(cell("in_use", count(member.in_use)));
    row.appendChild(cell("waiting", count(member.waiting)));
    row.appendChild(cell("seen", ago(member.seen_ago_ms)));
    var up = member.started_ms ? span(Math.max(0, Date.now() - member.started_ms) / 1000) : "—";
    row.appendChild(cell("up", up));
    row.appendChild(cell("address", member.address || "—", "font-monospace"));
    return row;
  }

  function listingNote(answer) {
    var listing = answer.listing || {};
    var shown = (answer.members || []).length;
    var note;
    if (listing.state === "fresh") {
      note = "Read from Redis " + ago(listing.age_ms) + ".";
    } else if (listing.state === "last_known") {
      note = "Last list read from Redis, " + ago(listing.age_ms) + ".";
    } else {
      note = "No list read from Redis yet.";
    }
    if (listing.error) note += " Redis: " + listing.error + ".";
    if (answer.members_total > shown) note += " Showing " + shown + " of " + count(answer.members_total) + " instances.";
    if (answer.mode === "local") note += " Serving alone on " + count(answer.lease) + " slots until Redis answers again.";
    return note;
  }

  function renderCluster(answer) {
    var shared = answer.mode === "shared";
    var badge = clusterCard.querySelector('[data-cluster="mode"]');
    badge.textContent = answer.mode;
    badge.className = "badge rounded-pill " + (shared ? "text-bg-success" : "text-bg-warning");
    clusterCard.querySelector('[data-cluster="server"]').textContent = answer.name + " · " + answer.server;
    clusterCard.querySelector('[data-cluster="instances"]').textContent = count(answer.instances);
    clusterCard.querySelector('[data-cluster="line"]').textContent = count(answer.line);
    clusterCard.querySelector('[data-cluster="reserved"]').textContent = count(answer.reserved);
    clusterCard.querySelector('[data-cluster="cap"]').textContent = count(answer.cap);
    var redis = answer.redis || {};
    clusterCard.querySelector('[data-cluster="latency"]').textContent = redis.up ? ms(redis.latency_ms) : "down";
    clusterCard.querySelector('[data-cluster="errors"]').textContent = count(redis.errors_total);
    clusterCard.classList.toggle("card-alert", !shared);

    var body = clusterCard.querySelector('[data-cluster="members"]');
    var stale = !answer.listing || answer.listing.state !== "fresh";
    var rows = (answer.members || []).map(function (member) { return memberRow(member, answer.cap, stale); });
    if (!rows.length) {
      var empty = document.createElement("tr");
      var td = cell("none", "No instances listed.", "text-body-secondary");
      td.colSpan = 8;
      empty.appendChild(td);
      rows.push(empty);
    }
    body.replaceChildren.apply(body, rows);
    clusterCard.querySelector('[data-cluster="listing"]').textContent = listingNote(answer);
    clusterCard.dataset.mode = answer.mode;
    clusterCard.dataset.loaded = "true";
  }

  function fetchNow() {
    portal.getJSON("/api/monitor").then(render).catch(function () { /* next round */ });
    if (clusterCard) portal.getJSON("/api/cluster").then(renderCluster).catch(function () { /* next round */ });
  }

  function stop() {
    if (timer) window.clearInterval(timer);
    timer = null;
  }

  function visible() {
    return portal.isActive("monitor") && !document.hidden;
  }

  function start() {
    if (!visible()) return;
    fetchNow();
    if (!timer) {
      timer = window.setInterval(function () {
        // Another tab opened or the page went to the background: stop asking.
        if (!visible()) { stop(); return; }
        fetchNow();
      }, EVERY_MS);
    }
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) stop(); else start();
  });
  window.addEventListener("resize", fitSparks);

  portal.tab("monitor", {
    shown: function () {
      fitSparks();
      start();
    }
  });
})();
