/* envlab report, charts.js: SVG charts and the canvas heatmap, drawn by hand.
   Concatenated by envlab.report.html inside one function scope with "use strict":
   base.js, charts.js, viewer.js share its constants and helpers. */
  /* ---------- charts ---------- */
  const W = 460, H = 230, M = { l: 52, r: 12, t: 12, b: 34 };
  function axes(svg, ymin, ymax, xlabels, ylabel) {
    const y = (v) => M.t + (H - M.t - M.b) * (1 - (v - ymin) / (ymax - ymin || 1));
    for (let i = 0; i <= 4; i++) {
      const v = ymin + ((ymax - ymin) * i) / 4;
      svg.append(s("line", { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v), stroke: "#e5e7eb" }),
        s("text", { x: M.l - 4, y: y(v) + 4, "text-anchor": "end", text: fmt(v, 2) }));
    }
    const xs = xlabels.length, bw = (W - M.l - M.r) / Math.max(xs, 1);
    xlabels.forEach((lab, i) => svg.append(s("text", { x: M.l + bw * (i + 0.5), y: H - M.b + 14, "text-anchor": "middle", text: lab })));
    if (ylabel) svg.append(s("text", { x: 12, y: (H - M.b + M.t) / 2, transform: `rotate(-90 12 ${(H - M.b + M.t) / 2})`, "text-anchor": "middle", text: ylabel }));
    return { y, bw };
  }
  const chart = (id, title, svg, legend) => h("div", { class: "chart", id }, h("h3", { text: title }), svg, legend || null);
  const runLegend = () => h("div", { class: "legend" }, RUNS.map((run, r) => h("span", {}, swatch(r), run.label)));
  const svgRoot = () => s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });

  function meanChart() {
    const svg = svgRoot();
    const hi = Math.max(1, ...RUNS.map((r) => r.summary.mean_reward_ci?.high ?? r.summary.mean_reward ?? 0));
    const lo = Math.min(0, ...RUNS.map((r) => r.summary.mean_reward_ci?.low ?? r.summary.mean_reward ?? 0));
    const { y, bw } = axes(svg, lo, hi, RUNS.map((r) => r.label.slice(0, 18)), "mean reward");
    RUNS.forEach((run, r) => {
      const S = run.summary, x = M.l + bw * r + bw * 0.2, w = bw * 0.6;
      if (S.mean_reward === null) return;
      svg.append(s("rect", { class: "bar", x, width: w, y: Math.min(y(S.mean_reward), y(0)), height: Math.abs(y(0) - y(S.mean_reward)), fill: color(r), opacity: 0.8 },
        s("title", { text: `${run.label}: ${fmt(S.mean_reward)} (${pct} CI ${ci(S.mean_reward_ci)})` })));
      const e = S.mean_reward_ci;
      if (e && e.low !== null) {
        const cx = x + w / 2;
        svg.append(s("path", { class: "whisker", d: `M${cx},${y(e.low)}V${y(e.high)}M${cx - 6},${y(e.low)}h12M${cx - 6},${y(e.high)}h12`, stroke: "#111827", "stroke-width": 1.5, fill: "none" }));
      }
    });
    svg.dataset.drawn = String(RUNS.length);
    return chart("chart-mean", `Mean reward with ${pct} confidence interval`, svg);
  }

  function passkChart() {
    const svg = svgRoot();
    const K = Math.max(1, ...RUNS.map((r) => r.summary.samples_per_task));
    const ks = Array.from({ length: K }, (_, i) => i + 1);
    const { y } = axes(svg, 0, 1, [], "probability");
    const x = (k) => (K === 1 ? (M.l + W - M.r) / 2 : M.l + 10 + ((W - M.l - M.r - 20) * (k - 1)) / (K - 1));
    ks.forEach((k) => svg.append(s("text", { x: x(k), y: H - M.b + 14, "text-anchor": "middle", text: "k=" + k })));
    let marks = 0;
    RUNS.forEach((run, r) => {
      for (const [key, dash] of [["pass_at_k", null], ["pass_hat_k", "5 4"]]) {
        const vals = ks.filter((k) => run.summary[key][String(k)] !== undefined);
        if (!vals.length) continue;
        const cis = run.summary[key + "_ci"] || {};
        const band = vals.filter((k) => cis[k] && cis[k].low !== null);
        if (band.length > 1) {
          const up = band.map((k) => `${x(k)},${y(Math.min(1, cis[k].high))}`);
          const down = band.slice().reverse().map((k) => `${x(k)},${y(Math.max(0, cis[k].low))}`);
          svg.append(s("polygon", { points: up.concat(down).join(" "), fill: color(r), opacity: 0.08 }));
        }
        const pts = vals.map((k) => `${x(k)},${y(run.summary[key][String(k)])}`);
        svg.append(s("polyline", { class: "line", points: pts.join(" "), fill: "none", stroke: color(r), "stroke-width": 2, "stroke-dasharray": dash }));
        vals.forEach((k) => svg.append(s("circle", { cx: x(k), cy: y(run.summary[key][String(k)]), r: 3, fill: color(r) },
          s("title", { text: `${run.label} ${key === "pass_at_k" ? "pass@" : "pass^"}${k} = ${fmt(run.summary[key][String(k)])} (${pct} CI ${ci(cis[k])})` }))));
        marks += vals.length;
      }
    });
    svg.dataset.drawn = String(marks);
    return chart("chart-passk", "pass@k (solid) and pass^k (dashed) over k", svg, runLegend());
  }

  function rewardChart() {
    const svg = svgRoot();
    const all = RUNS.map((run) => run.ep.reward.filter((v, i) => v !== null && !UNSCORED.has(D.statuses[run.ep.status[i]])));
    const flat = all.flat();
    const lo = Math.min(0, ...(flat.length ? [Math.min(...flat.slice(0, 100000))] : [0]));
    const hi = Math.max(1, ...(flat.length ? [Math.max(...flat.slice(0, 100000))] : [1]));
    const B = 10, width = (hi - lo) / B;
    const hists = all.map((vals) => {
      const c = new Array(B).fill(0);
      for (const v of vals) c[Math.min(B - 1, Math.max(0, Math.floor((v - lo) / width)))]++;
      return c.map((n) => (vals.length ? n / vals.length : 0));
    });
    const top = Math.min(1, Math.ceil(Math.max(0.05, ...hists.flat()) * 10) / 10);
    const labels = Array.from({ length: B }, (_, i) => fmt(lo + width * i, 1));
    const { y, bw } = axes(svg, 0, top, labels, "share of episodes");
    let marks = 0;
    hists.forEach((c, r) => c.forEach((f, i) => {
      const w = (bw * 0.8) / RUNS.length, x = M.l + bw * i + bw * 0.1 + w * r;
      svg.append(s("rect", { class: "bar", x, width: Math.max(w - 1, 1), y: y(f), height: y(0) - y(f), fill: color(r) },
        s("title", { text: `${RUNS[r].label}: ${fmt(f * 100, 1)}% of scored episodes in [${fmt(lo + width * i, 2)}, ${fmt(lo + width * (i + 1), 2)})` })));
      marks++;
    }));
    svg.dataset.drawn = String(marks);
    return chart("chart-rewards", "Reward distribution (scored episodes; bins of the reward)", svg, runLegend());
  }

  function statusChart() {
    const rowH = 26, hgt = M.t + RUNS.length * rowH + 30;
    const svg = s("svg", { viewBox: `0 0 ${W} ${hgt}`, role: "img" });
    const left = 110, right = W - 12;
    let marks = 0;
    RUNS.forEach((run, r) => {
      const counts = run.summary.status_counts, total = run.summary.n_episodes || 1;
      let x = left;
      const yy = M.t + r * rowH;
      svg.append(s("text", { x: 4, y: yy + 15, text: run.label.slice(0, 16) }));
      for (const st of D.statuses) {
        const n = counts[st] || 0;
        if (!n) continue;
        const w = ((right - left) * n) / total;
        svg.append(s("rect", { class: "bar", x, y: yy, width: w, height: rowH - 6, fill: SCOLORS[st] }, s("title", { text: `${run.label}: ${st} ${n}` })));
        if (w > 28) svg.append(s("text", { x: x + 3, y: yy + 14, style: "fill:#fff", text: n }));
        x += w; marks++;
      }
    });
    const leg = h("div", { class: "legend" }, D.statuses.map((st) => h("span", {}, h("span", { class: "swatch", style: `background:${SCOLORS[st]}` }), st)));
    svg.dataset.drawn = String(marks);
    return chart("chart-status", "Episodes by status (infra and env errors are excluded from scores)", svg, leg);
  }

  {
    const sec = section("charts", "Charts");
    sec.append(h("div", { class: "charts" }, meanChart(), passkChart(), rewardChart(), statusChart()));
  }

  /* ---------- heatmap: tasks x runs, drawn only where visible ---------- */
  const heat = (() => {
    const sec = section("heatmap", "Tasks × runs: mean reward per task (click a cell to open its episodes)");
    const sortSel = h("select", { id: "heatmap-sort" },
      [["id", "task id"], ["mean", "mean reward (hardest first)"], ["spread", "disagreement between runs"]].map(([v, t]) => h("option", { value: v, text: t })));
    const filter = h("input", { id: "heatmap-filter", placeholder: "filter task ids", size: 24 });
    const tip = h("div", { id: "heatmap-tip", text: "hover a cell" });
    const canvas = h("canvas", { id: "heatmap-canvas" });
    const spacer = h("div");
    const wrap = h("div", { id: "heatmap-wrap" }, canvas, spacer);
    sec.append(h("div", { class: "controls" }, "sort by ", sortSel, filter,
      h("span", { class: "ci", text: "red = 0, green = 1, grey = not scored" })), tip, wrap);
    const ROW = 16, HEAD = 22, LABEL = 300;
    let order = [];
    let rmin = 0, rmax = 1;
    for (const run of RUNS) for (let t = 0; t < NT; t++) {
      const m = taskMean(run, t);
      if (m !== null) { rmin = Math.min(rmin, m); rmax = Math.max(rmax, m); }
    }
    function cellColor(m) {
      if (m === null) return "#e5e7eb";
      const v = (m - rmin) / (rmax - rmin || 1);
      const a = v < 0.5 ? [220, 38, 38] : [245, 158, 11], b = v < 0.5 ? [245, 158, 11] : [22, 163, 74];
      const f = v < 0.5 ? v * 2 : (v - 0.5) * 2;
      return `rgb(${a.map((c, i) => Math.round(c + (b[i] - c) * f)).join(",")})`;
    }
    function computeOrder() {
      const q = filter.value.trim().toLowerCase();
      order = [];
      for (let t = 0; t < NT; t++) if (!q || D.tasks[t].toLowerCase().includes(q)) order.push(t);
      const key = sortSel.value;
      if (key === "mean" || key === "spread") {
        const val = new Float64Array(NT);
        for (const t of order) {
          const ms = RUNS.map((run) => taskMean(run, t)).filter((m) => m !== null);
          val[t] = !ms.length ? Infinity : key === "mean" ? ms.reduce((a, b) => a + b, 0) / ms.length : -(Math.max(...ms) - Math.min(...ms));
        }
        order.sort((a, b) => val[a] - val[b] || a - b);
      }
    }
    function geometry() {
      const width = Math.max(wrap.clientWidth - 2, 400);
      const cw = Math.max(24, Math.min(90, (width - LABEL - 8) / RUNS.length));
      return { width, cw, height: wrap.clientHeight - 2 };
    }
    function draw() {
      const { width, cw, height } = geometry();
      const dpr = window.devicePixelRatio || 1;
      canvas.width = width * dpr; canvas.height = height * dpr;
      canvas.style.width = width + "px"; canvas.style.height = height + "px";
      spacer.style.height = Math.max(0, order.length * ROW + HEAD - height) + "px";
      const ctx = canvas.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, width, height);
      ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
      const first = Math.floor(wrap.scrollTop / ROW), off = wrap.scrollTop % ROW;
      let drawn = 0;
      for (let i = first; i < order.length; i++) {
        const yy = HEAD + (i - first) * ROW - off;
        if (yy > height) break;
        const t = order[i];
        ctx.fillStyle = "#1f2933";
        ctx.fillText(D.tasks[t].length > 44 ? "…" + D.tasks[t].slice(-43) : D.tasks[t], 4, yy + ROW / 2);
        RUNS.forEach((run, r) => {
          ctx.fillStyle = cellColor(taskMean(run, t));
          ctx.fillRect(LABEL + r * cw, yy + 1, cw - 2, ROW - 2);
          drawn++;
        });
      }
      ctx.fillStyle = "#f5f7fa"; ctx.fillRect(0, 0, width, HEAD);
      ctx.fillStyle = "#1f2933";
      ctx.fillText(`${order.length} tasks`, 4, HEAD / 2);
      RUNS.forEach((run, r) => { ctx.fillStyle = color(r); ctx.fillText(run.label.slice(0, Math.floor(cw / 6)), LABEL + r * cw, HEAD / 2); });
      canvas.dataset.drawn = String(drawn);
    }
    function cellAt(ev) {
      const rect = canvas.getBoundingClientRect();
      const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      const { cw } = geometry();
      if (y < HEAD || x < LABEL) return null;
      const i = Math.floor((y - HEAD + wrap.scrollTop) / ROW), r = Math.floor((x - LABEL) / cw);
      if (i < 0 || i >= order.length || r < 0 || r >= RUNS.length) return null;
      return { t: order[i], r };
    }
    let pending = false;
    wrap.addEventListener("scroll", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; draw(); });
    });
    canvas.addEventListener("mousemove", (ev) => {
      const c = cellAt(ev);
      if (!c) return;
      const run = RUNS[c.r], b = run.byTask;
      tip.textContent = `${D.tasks[c.t]} · ${run.label}: mean ${fmt(taskMean(run, c.t))}, passed ${b.pass[c.t]}/${b.n[c.t]}` +
        (b.tot[c.t] > b.n[c.t] ? `, ${b.tot[c.t] - b.n[c.t]} excluded` : "");
    });
    canvas.addEventListener("click", (ev) => {
      const c = cellAt(ev);
      if (c) viewer.open(c.r, c.t, null, true);
    });
    sortSel.addEventListener("change", () => { computeOrder(); wrap.scrollTop = 0; draw(); });
    filter.addEventListener("input", () => { computeOrder(); wrap.scrollTop = 0; draw(); });
    window.addEventListener("resize", draw);
    computeOrder();
    return { draw };
  })();

