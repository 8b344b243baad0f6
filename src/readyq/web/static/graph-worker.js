// Lays out a dependency graph with dagre, off the page's thread: a graph of thousands of
// jobs takes seconds to lay out, and the page stays responsive meanwhile.
/* global dagre, importScripts */
importScripts("vendor/dagre-3.1.3.min.js");

self.onmessage = function (event) {
  var data = event.data;
  var g = new dagre.graphlib.Graph({ compound: true, multigraph: false });
  g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 42, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(function () { return {}; });
  data.clusters.forEach(function (c) { g.setNode(c.id, { label: c.label, clusterLabelPos: "top", paddingTop: 18 }); });
  data.clusters.forEach(function (c) { if (c.parent) { g.setParent(c.id, c.parent); } });
  data.nodes.forEach(function (n) {
    g.setNode(n.id, { width: n.w, height: n.h });
    if (n.parent) { g.setParent(n.id, n.parent); }
  });
  data.edges.forEach(function (e) { g.setEdge(e[0], e[1]); });
  dagre.layout(g);
  var out = { nodes: {}, clusters: {}, edges: [], width: g.graph().width || 0, height: g.graph().height || 0 };
  data.nodes.forEach(function (n) { var v = g.node(n.id); out.nodes[n.id] = { x: v.x, y: v.y }; });
  data.clusters.forEach(function (c) {
    var v = g.node(c.id);
    out.clusters[c.id] = { x: v.x, y: v.y, width: v.width, height: v.height };
  });
  g.edges().forEach(function (e) { out.edges.push({ from: e.v, to: e.w, points: g.edge(e).points }); });
  self.postMessage(out);
};
