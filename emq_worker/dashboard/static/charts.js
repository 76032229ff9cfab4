// Graphs drawn in the browser as inline SVG from the dashboard's JSON endpoints (no library,
// nothing from another origin: the Content-Security-Policy allows our own script only).
//
// <div class="chart" data-chart="/api/history?..." data-kind="throughput|duration"
//      data-refresh-ms="5000"> is drawn from the series at that URL and redrawn on every refresh;
// an element with data-sparks="/api/sparks?..." fills each <svg data-spark="queue"> inside it.
// Text goes in through textContent only, never as markup.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const H = 180, LEFT = 52, RIGHT = 12, TOP = 12, BOTTOM = 26;
  const KINDS = {
    throughput: [
      { name: "completed", label: "completed", value: (p) => p.completed },
      { name: "failed", label: "failed (retried + dead)", value: (p) => p.retried + p.dead },
    ],
    duration: [
      { name: "mean", label: "mean (ms)", value: (p) => p.mean_ms },
      { name: "p95", label: "p95 (ms)", value: (p) => p.p95_ms },
    ],
  };

  function node(name, attrs, parent) {
    const el = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
    if (parent) parent.appendChild(el);
    return el;
  }

  function label(parent, x, y, text, anchor) {
    const el = node("text", { x: x, y: y, "text-anchor": anchor || "start" }, parent);
    el.textContent = text;
    return el;
  }

  function clock(ms, withDay) {
    const d = new Date(ms);
    const hm = String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
    return withDay ? d.getMonth() + 1 + "/" + d.getDate() + " " + hm : hm;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
    return 10 * power;
  }

  const present = (v) => v !== null && v !== undefined;

  function draw(el, data) {
    const W = Math.max(320, Math.round(el.clientWidth || 640));
    const series = KINDS[el.dataset.kind] || KINDS.throughput;
    const points = data.points || [];
    const values = series.map((s) => points.map((p) => s.value(p)));
    const top = niceMax(Math.max(0, ...values.flat().filter((v) => v !== null)));
    const svg = node("svg", { viewBox: "0 0 " + W + " " + H, class: "graph", role: "img" });
    svg.setAttribute("aria-label", el.dataset.kind + " over " + points.length + " points");
    const plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
    const x = (i) => LEFT + (points.length > 1 ? (i * plotW) / (points.length - 1) : plotW / 2);
    const y = (v) => TOP + plotH - (v / top) * plotH;
    node("rect", { x: LEFT, y: TOP, width: plotW, height: plotH, class: "plot" }, svg);
    for (const share of [0, 0.5, 1]) {
      node("line", { x1: LEFT, x2: W - RIGHT, y1: y(top * share), y2: y(top * share), class: "grid" }, svg);
      label(svg, LEFT - 6, y(top * share) + 4, String(+(top * share).toPrecision(3)), "end");
    }
    const longRange = data.step_ms >= 3600000;
    if (points.length) {
      label(svg, LEFT, H - 8, clock(points[0].t, longRange), "start");
      label(svg, W - RIGHT, H - 8, clock(points[points.length - 1].t, longRange), "end");
    }
    // The last point is the bucket still filling (it holds now): its segment is dashed.
    const at = (i, v) => x(i).toFixed(1) + "," + y(v).toFixed(1);
    series.forEach((s, n) => {
      const vs = values[n], last = vs.length - 1;
      let path = "";
      vs.forEach((v, i) => {
        if (i === last || v === null || v === undefined) return;
        path += (path && vs[i - 1] !== null ? "L" : "M") + at(i, v);
      });
      if (path) node("path", { d: path, class: "line " + s.name }, svg);
      if (last > 0 && vs[last] !== null && vs[last - 1] !== null) {
        node("path", { d: "M" + at(last - 1, vs[last - 1]) + "L" + at(last, vs[last]), class: "line partial " + s.name }, svg);
      }
      // A point with no neighbour to draw a line to (a lone minute of runs) would be a bare
      // moveto, which draws nothing: it gets a dot (hollow for the bucket still filling).
      vs.forEach((v, i) => {
        if (!present(v) || present(vs[i - 1]) || present(vs[i + 1])) return;
        node("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 3, class: "dot " + s.name + (i === last ? " partial" : "") }, svg);
      });
    });
    points.forEach((p, i) => {
      const hit = node("rect", { x: x(i) - plotW / points.length / 2, y: TOP, width: plotW / points.length, height: plotH, class: "hit" }, svg);
      const title = node("title", {}, hit);
      title.textContent = clock(p.t, longRange) + ": " + series.map((s) => s.label + " " + (s.value(p) ?? "–")).join(", ");
    });
    const legend = document.createElement("p");
    legend.className = "chart-legend";
    series.forEach((s) => {
      const key = document.createElement("span");
      key.className = "key " + s.name;
      key.textContent = s.label;
      legend.appendChild(key);
    });
    el.replaceChildren(svg, legend);
    el.dataset.drawn = String(Number(el.dataset.drawn || 0) + 1);
    el.dataset.points = String(points.length);
  }

  async function fetchJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(url + ": " + response.status);
    return response.json();
  }

  function every(el, ms, job) {
    async function tick() {
      try {
        await job();
        el.classList.remove("stale");
      } catch (error) {
        el.classList.add("stale");
      }
      window.setTimeout(tick, ms);
    }
    tick();
  }

  function chart(el) {
    const ms = Math.max(Number(el.dataset.refreshMs) || 5000, 1000);
    every(el, ms, async () => draw(el, await fetchJSON(el.dataset.chart)));
  }

  function spark(svg, rows) {
    const max = niceMax(Math.max(1, ...rows.flat()));
    const line = (k) => rows.map((r, i) => (i * 120 / Math.max(rows.length - 1, 1)).toFixed(1) + "," + (23 - (r[k] / max) * 22).toFixed(1)).join(" ");
    const done = rows.reduce((a, r) => a + r[0], 0), failed = rows.reduce((a, r) => a + r[1], 0);
    const title = node("title", {});
    title.textContent = done + " completed, " + failed + " failed in the last hour";
    svg.replaceChildren(title, node("polyline", { points: line(0), class: "completed" }), node("polyline", { points: line(1), class: "failed" }));
    svg.dataset.drawn = String(Number(svg.dataset.drawn || 0) + 1);
  }

  function sparks(el) {
    let last = null;
    const fill = () => {
      if (!last) return;
      el.querySelectorAll("svg[data-spark]").forEach((svg) => {
        const rows = last.queues[svg.dataset.spark];
        if (rows) spark(svg, rows);
      });
    };
    el.addEventListener("emq:refreshed", fill);
    every(el, 10000, async () => {
      last = await fetchJSON(el.dataset.sparks);
      fill();
    });
  }

  document.querySelectorAll("[data-chart]").forEach(chart);
  document.querySelectorAll("[data-sparks]").forEach(sparks);
})();
