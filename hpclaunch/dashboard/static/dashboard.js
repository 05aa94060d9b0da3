// hpclaunch dashboard: both pages follow the server's events (EventSource) and redraw in place.
// Every value from the registry or the logs reaches the page as text (textContent), never as HTML.
(function () {
  "use strict";

  // Every path is under the page's root: "/", or with a token "/<random>/", the only path its cookie
  // is sent to (a cookie for "/" would go to every port of this host).
  var root = document.body.getAttribute("data-root") || "/";

  // A token in the address bar has done its work (the server set a cookie): keep it out of
  // screenshots, history and shared links.
  var params = new URLSearchParams(location.search);
  if (params.has("token")) {
    params.delete("token");
    history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function cell(row, value, cls) {
    var td = el("td", cls ? {"class": cls} : {});
    if (value instanceof Node) td.appendChild(value); else td.textContent = value === null || value === undefined ? "" : String(value);
    row.appendChild(td);
    return td;
  }

  function when(unix) {
    return unix ? new Date(unix * 1000).toLocaleString() : "";
  }

  function num(v, digits) {
    if (typeof v !== "number") return "";
    return Math.abs(v) >= 1000 || digits === 0 ? Math.round(v).toLocaleString() : v.toPrecision(digits || 4);
  }

  function follow(path, event, onData) {
    var conn = document.getElementById("conn");
    var source = new EventSource(path);
    source.addEventListener(event, function (e) {
      onData(JSON.parse(e.data));
      conn.textContent = "live · " + new Date().toLocaleTimeString();
      conn.className = "conn live";
    });
    source.onerror = function () {   // EventSource reconnects by itself
      conn.textContent = "reconnecting…";
      conn.className = "conn down";
    };
  }

  function showError(text) {
    var p = document.getElementById("error");
    p.hidden = !text;
    p.textContent = text || "";
  }

  // ---------------------------------------------------------------- the job list
  function jobsPage() {
    follow(root + "events", "jobs", function (data) {
      showError(data.error);
      var rows = data.jobs.map(function (j) {
        var tr = el("tr", {"data-key": j.key, "class": "state-" + j.state.toLowerCase()});
        cell(tr, el("a", {href: root + "job/" + j.key}, j.job_id));
        cell(tr, j.name);
        cell(tr, j.state + (j.exit_code !== null && j.exit_code !== undefined ? " (exit " + j.exit_code + ")" : "")
                 + (j.waiting ? " · " + j.waiting : ""), "state");
        cell(tr, j.backend);
        cell(tr, j.cluster);
        cell(tr, j.attempts);
        cell(tr, j.nodes || j.nodes_requested);
        cell(tr, j.elapsed);
        cell(tr, when(j.submit_time));
        cell(tr, j.user + "@" + j.host);
        return tr;
      });
      var body = document.querySelector("#jobs tbody");
      body.replaceChildren.apply(body, rows);
      document.getElementById("empty").hidden = rows.length > 0;
    });
  }

  // ---------------------------------------------------------------- one job
  var CHARTS = {
    power: ["GPU power", "W", "no GPU samples"],
    temp: ["GPU temperature", "°C", "no GPU samples"],
    cpu: ["Host CPU", "%", "no host samples yet"],
    mem: ["Host memory used", "GiB", "no host samples yet"]
  };
  var PLOT_CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["toImage"]};
  var traces = {};   // chart -> trace labels, in trace order

  function layout(name, empty) {
    var spec = CHARTS[name];
    return {
      title: {text: spec[0], font: {size: 14}}, height: 280, margin: {l: 55, r: 15, t: 40, b: 40},
      // empty, a date axis would show the year 2000: no axes, only the note
      xaxis: {type: "date", visible: !empty}, yaxis: {title: {text: spec[1]}, rangemode: "tozero", visible: !empty},
      legend: {orientation: "h", y: -0.2}, showlegend: true,
      annotations: empty ? [{text: spec[2], showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}] : []
    };
  }

  // plotly reads a subset of HTML in a trace's name (links, styles, line breaks) and decodes entities
  // after it: a label holds a host name from a monitor log, which the job's own programs write.
  function plotlyText(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function trace(label, points) {
    return {x: points.t.map(function (ms) { return new Date(ms); }), y: points.y, name: plotlyText(label),
            type: "scatter", mode: "lines", connectgaps: false};
  }

  function drawCharts(live) {
    Object.keys(CHARTS).forEach(function (name) {
      var div = document.getElementById("chart-" + name);
      var got = live.charts[name] || {};
      var labels = Object.keys(got).sort();
      if (live.full || !traces[name] || traces[name].length === 0) {
        traces[name] = labels;
        Plotly.react(div, labels.map(function (l) { return trace(l, got[l]); }), layout(name, !labels.length), PLOT_CONFIG);
        return;
      }
      var index = [], xs = [], ys = [];
      labels.forEach(function (label) {
        var i = traces[name].indexOf(label);
        if (i < 0) {
          traces[name].push(label);
          Plotly.addTraces(div, trace(label, got[label]));
          return;
        }
        var t = trace(label, got[label]);
        index.push(i); xs.push(t.x); ys.push(t.y);
      });
      if (index.length) Plotly.extendTraces(div, {x: xs, y: ys}, index);
    });
  }

  function drawFacts(job) {
    document.title = "hpclaunch: " + job.name + " (" + job.job_id + ")";
    document.getElementById("title").textContent = job.name + " · " + job.backend + " job " + job.job_id;
    document.getElementById("report-ref").textContent = job.job_id;
    var hosts = (job.hosts || []).map(function (h) { return h.host + " (ranks " + h.ranks.join(",") + ")"; }).join(", ");
    var facts = [
      ["state", job.state + (job.exit_code !== null && job.exit_code !== undefined ? " (exit " + job.exit_code + ")" : "")
                + (job.waiting ? " · " + job.waiting : job.reason ? " · " + job.reason : "")],
      ["attempts", job.attempts],
      ["nodes", hosts || job.nodes || (job.nodes_requested ? job.nodes_requested + " requested" : "")],
      ["elapsed", job.elapsed],
      ["submitted", when(job.submit_time) + " by " + job.user + "@" + job.host],
      ["ended", when(job.end_time)],
      ["cluster", job.cluster + (job.partition ? " · partition " + job.partition : "")],
      ["launcher", job.launcher || ""],
      ["run directory", job.run_dir],
      ["state from", job.source]
    ];
    var dl = document.getElementById("facts");
    var items = [];
    facts.forEach(function (f) {
      if (f[1] === "" || f[1] === null || f[1] === undefined) return;
      items.push(el("dt", {}, f[0]));
      items.push(el("dd", {id: "fact-" + f[0].replace(/ /g, "-")}, f[1]));
    });
    dl.replaceChildren.apply(dl, items);
    document.getElementById("remote").hidden = job.local;
  }

  function drawRanks(ranks) {
    var rows = ranks.map(function (r) {
      var tr = el("tr", {"data-rank": r.rank});
      cell(tr, r.rank);
      cell(tr, r.host);
      cell(tr, r.attempt);
      cell(tr, r.epoch);
      cell(tr, r.step, "step");
      cell(tr, num(r.loss, 4), "loss");
      cell(tr, num(r.samples_per_s, 4), "samples-per-s");
      cell(tr, typeof r.step_time_s === "number" ? num(r.step_time_s, 3) + " s" : "");
      cell(tr, when(r.time_unix));
      return tr;
    });
    var body = document.querySelector("#ranks tbody");
    body.replaceChildren.apply(body, rows);
    document.getElementById("no-ranks").hidden = rows.length > 0;
  }

  function drawAlerts(alerts) {
    var rows = (alerts || []).slice().reverse().map(function (a) {
      var sev = a.event === "resolved" ? "resolved" : a.severity;
      var tr = el("tr", {"class": "alert-" + sev, "data-rule": a.rule});
      cell(tr, sev, "severity");
      cell(tr, a.rule);
      cell(tr, [a.node, a.gpu === null || a.gpu === undefined ? "" : "GPU " + a.gpu,
                a.rank === null || a.rank === undefined ? "" : "rank " + a.rank].filter(Boolean).join(" "));
      cell(tr, when(a.first_seen));
      cell(tr, when(a.last_seen));
      cell(tr, a.message, "message");
      return tr;
    });
    var body = document.querySelector("#alerts tbody");
    body.replaceChildren.apply(body, rows);
    document.getElementById("no-alerts").hidden = rows.length > 0;
  }

  function jobPage(key) {
    follow(root + "job/" + key + "/events", "job", function (data) {
      showError(data.job.error);
      drawFacts(data.job);
      drawAlerts(data.live.alerts);
      drawRanks(data.live.ranks);
      drawCharts(data.live);
      var notes = document.getElementById("notes");
      notes.replaceChildren.apply(notes, (data.live.notes || []).map(function (n) { return el("li", {}, n); }));
    });
  }

  var page = document.body.getAttribute("data-page");
  if (page === "jobs") jobsPage();
  if (page === "job") jobPage(document.body.getAttribute("data-key"));
})();
