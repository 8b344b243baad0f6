// The graph page: the jobs from /api/jobs/{id}/graph, laid out by dagre in a worker
// (graph-worker.js) and drawn as SVG. Each node is a link to its job and carries
// data-job-id and data-state; containers with children in view are drawn as boxes
// around them. Drag to pan, wheel to zoom.
(function () {
  "use strict";
  var host = document.getElementById("graph");
  if (!host) { return; }
  var base = document.body.getAttribute("data-base") || "";
  var root = host.getAttribute("data-root");
  var statusLine = host.querySelector("[data-graph-status]");
  var NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function label(n) {
    var text = "#" + n.id + " " + n.type;
    return text.length > 28 ? text.slice(0, 27) + "\u2026" : text;
  }

  function draw(data, layout) {
    host.textContent = "";
    var svg = el("svg", { "aria-label": "dependency graph", role: "img", id: "graph-svg" }, host);
    var defs = el("defs", {}, svg);
    var marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5",
      markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a93a3" }, marker);
    var scene = el("g", {}, svg);
    var byId = {};
    data.nodes.forEach(function (n) { byId[String(n.id)] = n; });
    Object.keys(layout.clusters).forEach(function (cid) {
      var c = layout.clusters[cid];
      var jobId = cid.slice("cluster:".length);
      var n = byId[jobId];
      var a = el("a", { href: base + "/jobs/" + jobId }, scene);
      var g = el("g", { "class": "cluster state-" + n.state + (n.stuck ? " stuck" : "") +
        (jobId === root ? " root" : ""), "data-container-id": jobId, "data-state": n.state }, a);
      el("rect", { x: c.x - c.width / 2, y: c.y - c.height / 2, width: c.width, height: c.height }, g);
      var t = el("text", { x: c.x - c.width / 2 + 8, y: c.y - c.height / 2 + 13 }, g);
      t.textContent = label(n) + (n.stuck ? " (stuck)" : "");
    });
    layout.edges.forEach(function (e) {
      var pts = e.points || [];
      if (!pts.length) { return; }
      var d = "M " + pts[0].x + " " + pts[0].y;
      for (var i = 1; i < pts.length; i++) { d += " L " + pts[i].x + " " + pts[i].y; }
      el("path", { d: d, "class": "edge", "data-from": e.from, "data-to": e.to }, scene);
    });
    Object.keys(layout.nodes).forEach(function (id) {
      var n = byId[id];
      var p = layout.nodes[id];
      if (n.boxed) { return; }  // drawn as its box; its node only anchors its edges
      var w = n.w, h = n.h;
      var a = el("a", { href: base + "/jobs/" + id }, scene);
      var g = el("g", { "class": "node state-" + n.state + (id === root ? " root" : "") +
        (n.stuck ? " stuck" : ""),
        "data-job-id": id, "data-state": n.state, transform: "translate(" + (p.x - w / 2) + "," + (p.y - h / 2) + ")" }, a);
      var title = el("title", {}, g);
      title.textContent = "#" + id + " " + n.type + " (" + n.state + ")" + (n.is_container ? ", container" : "") + (n.spawned_by ? ", spawned by #" + n.spawned_by : "") + ", group " + n.group + (n.stuck ? "; stuck: it cannot progress on its own" : "");
      el("rect", { width: w, height: h }, g);
      var t = el("text", { x: 8, y: h / 2 + 4 }, g);
      t.textContent = label(n);
    });
    // The whole graph when it fits at a readable size; else a readable part of it,
    // around the job the page is about (drag and zoom for the rest).
    var hostW = host.clientWidth || 1000, hostH = host.clientHeight || 560;
    var fit = Math.max(layout.width / hostW, layout.height / hostH, 0.5);
    var scale = Math.min(fit, 1.6);
    var view = { w: hostW * scale, h: hostH * scale, x: 0, y: 0 };
    var focus = layout.nodes[root] || { x: layout.width / 2, y: layout.height / 2 };
    view.x = fit > scale ? Math.max(0, Math.min(focus.x - view.w / 2, layout.width - view.w)) : (layout.width - view.w) / 2;
    view.y = fit > scale ? Math.max(0, Math.min(focus.y - view.h / 2, layout.height - view.h)) : (layout.height - view.h) / 2;
    function apply() { svg.setAttribute("viewBox", view.x + " " + view.y + " " + view.w + " " + view.h); }
    apply();
    var drag = null;
    svg.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y }; });
    window.addEventListener("mouseup", function () { drag = null; });
    svg.addEventListener("mousemove", function (ev) {
      if (!drag) { return; }
      var scale = view.w / svg.clientWidth;
      view.x = drag.vx - (ev.clientX - drag.x) * scale;
      view.y = drag.vy - (ev.clientY - drag.y) * scale;
      apply();
    });
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var f = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
      var r = svg.getBoundingClientRect();
      var mx = view.x + (ev.clientX - r.left) / r.width * view.w;
      var my = view.y + (ev.clientY - r.top) / r.height * view.h;
      view.x = mx - (mx - view.x) * f; view.y = my - (my - view.y) * f;
      view.w *= f; view.h *= f;
      apply();
    }, { passive: false });
    host.setAttribute("data-drawn", String(Object.keys(layout.nodes).length));
  }

  function layoutAndDraw(data) {
    // Containers that have children in view become boxes (clusters) around them, drawn
    // once: the container's own node is a point in its box that anchors its edges.
    var inView = {};
    data.nodes.forEach(function (n) { inView[n.id] = n; });
    var hasKids = {};
    data.nodes.forEach(function (n) { if (n.parent_id && inView[n.parent_id]) { hasKids[n.parent_id] = true; } });
    var clusters = Object.keys(hasKids).map(function (id) {
      var p = inView[id].parent_id;
      return { id: "cluster:" + id, label: "#" + id, parent: p && hasKids[p] ? "cluster:" + p : null };
    });
    var stuck = {};
    (data.stuck || []).forEach(function (id) { stuck[id] = true; });
    var nodes = data.nodes.map(function (n) {
      var text = label(n);
      var boxed = !!hasKids[n.id];
      var parent = boxed ? "cluster:" + n.id : (n.parent_id && hasKids[n.parent_id] ? "cluster:" + n.parent_id : null);
      return { id: String(n.id), w: boxed ? 1 : Math.max(60, text.length * 6.6 + 16),
        h: boxed ? 1 : 26, parent: parent, boxed: boxed, stuck: !!stuck[n.id],
        state: n.state, type: n.type, group: n.group, is_container: n.is_container,
        spawned_by: n.spawned_by };
    });
    var edges = data.edges.filter(function (e) { return e.kind === "depends"; })
      .map(function (e) { return [String(e.from), String(e.to)]; });
    var worker = new Worker(base + "/static/graph-worker.js");
    var started = Date.now();
    worker.onmessage = function (ev) {
      worker.terminate();
      var drawn = { nodes: nodes };
      draw(drawn, ev.data);
      host.setAttribute("data-layout-ms", String(Date.now() - started));
    };
    worker.onerror = function () { if (statusLine) { statusLine.textContent = "the layout failed"; } };
    worker.postMessage({ nodes: nodes, clusters: clusters, edges: edges });
  }

  fetch(host.getAttribute("data-graph-url"), { credentials: "same-origin" })
    .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
    .then(layoutAndDraw)
    .catch(function (err) { if (statusLine) { statusLine.textContent = "the graph could not be loaded (" + err + ")"; } });
})();
