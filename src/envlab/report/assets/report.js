/* envlab report: draws the summary, charts, heatmap and trajectory viewer from the embedded data.
   No libraries, no network. Episodes are parsed only when opened; the heatmap and the task list
   draw only what is visible, so a run of 10,000 episodes stays responsive. */
(function () {
  "use strict";
  const T0 = performance.now();
  const D = JSON.parse(document.getElementById("envlab-data").textContent);
  const RUNS = D.runs;
  const NT = D.tasks.length;
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"];
  const SCOLORS = { ok: "#16a34a", truncated: "#ca8a04", timeout: "#ea580c", agent_error: "#dc2626",
    env_error: "#7c3aed", infra_error: "#6b7280" };
  const UNSCORED = new Set(["env_error", "infra_error"]);
  const color = (r) => COLORS[r % COLORS.length];

  /* ---------- small DOM helpers ---------- */
  function put(e, attrs, kids) {
    for (const k in attrs || {}) {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of kids.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const h = (tag, attrs, ...kids) => put(document.createElement(tag), attrs, kids);
  const s = (tag, attrs, ...kids) => put(document.createElementNS(NS, tag), attrs, kids);
  const fmt = (x, d = 3) => (x === null || x === undefined || !isFinite(x) ? "–" : Number(x).toFixed(d));
  const ci = (e) => (!e || e.low === null ? "no CI" : `${fmt(e.low)} to ${fmt(e.high)}`);
  const pct = Math.round(D.confidence * 100) + "%";
  const swatch = (r) => h("span", { class: "swatch", style: `background:${color(r)}` });
  const badge = (status) => h("span", { class: "badge", style: `background:${SCOLORS[status] || "#888"}`, text: status });
  const jsonBlock = (title, obj, open) => h("details", { open: open || null }, h("summary", { text: title }), h("pre", { text: JSON.stringify(obj, null, 2) }));
  const isPass = (run, r) => r !== null && r >= run.summary.pass_threshold - 1e-9;

  /* ---------- per-task numbers of every run ---------- */
  for (const run of RUNS) {
    const sum = new Float64Array(NT), n = new Int32Array(NT), pass = new Int32Array(NT), tot = new Int32Array(NT);
    const ep = run.ep;
    for (let i = 0; i < ep.task.length; i++) {
      const t = ep.task[i], r = ep.reward[i];
      tot[t]++;
      if (r !== null && !UNSCORED.has(D.statuses[ep.status[i]])) {
        sum[t] += r; n[t]++;
        if (isPass(run, r)) pass[t]++;
      }
    }
    run.byTask = { sum, n, pass, tot };
    run.rows = null; // task index -> episode rows, built when the viewer needs it
    run.lines = null; // episode JSON lines, split when the viewer needs them
  }
  const taskMean = (run, t) => (run.byTask.n[t] ? run.byTask.sum[t] / run.byTask.n[t] : null);

  /* ---------- layout ---------- */
  const app = document.getElementById("app");
  const sections = [["summary", "Summary"], ["charts", "Charts"], ["heatmap", "Tasks × runs"],
    ["agents", "Agents"], ["viewer", "Trajectories"]];
  if (D.comparisons.length) sections.splice(1, 0, ["compare", "Comparisons"]);
  app.append(
    h("header", { class: "top" }, h("h1", { text: D.title }),
      h("div", { class: "meta", text: `generated ${D.generated_at} by envlab ${D.envlab_version} · ${RUNS.length} run(s) · ${NT} tasks · ${pct} confidence intervals` })),
    h("nav", { class: "toc" }, sections.map(([id, name]) => h("a", { href: "#" + id, text: name }))),
  );
  const section = (id, title) => {
    const el = h("section", { id }, h("h2", { text: title }));
    app.append(el);
    return el;
  };

  /* ---------- summary ---------- */
  {
    const sec = section("summary", "Summary");
    const kmax = Math.max(...RUNS.map((r) => r.summary.samples_per_task));
    const head = ["run", "agent", "environment", "tasks", "episodes (scored / excluded)",
      `mean reward (${pct} CI)`, `pass rate (${pct} CI)`, "pass@1", kmax > 1 ? `pass^${kmax}` : null,
      "gate", "tool errors", "mean steps"].filter((x) => x !== null);
    const rows = RUNS.map((run, r) => {
      const S = run.summary;
      const gate = S.gate ? h("span", { class: S.gate.passed === false ? "error" : "" },
        `${S.gate.passed_tasks.length}/${S.gate.must_pass.length} ${S.gate.passed === null ? "undecided" : S.gate.passed ? "passed" : "FAILED"}`) : "–";
      return h("tr", {},
        h("td", {}, swatch(r), run.label),
        h("td", {}, run.agent.name, run.agent.privileged ? h("span", { class: "note", text: " (privileged)" }) : null),
        h("td", {}, `${run.env_id} `, h("span", { class: "ci", text: run.env_hash })),
        h("td", { class: "num", text: S.n_tasks }),
        h("td", { class: "num", text: `${S.n_episodes} (${S.n_scored} / ${S.n_excluded})` }),
        h("td", { class: "num" }, fmt(S.mean_reward), h("div", { class: "ci", text: ci(S.mean_reward_ci) })),
        h("td", { class: "num" }, fmt(S.pass_rate), h("div", { class: "ci", text: ci(S.pass_rate_ci) })),
        h("td", { class: "num", text: fmt(S.pass_at_k["1"]) }),
        kmax > 1 ? h("td", { class: "num", text: fmt(S.pass_hat_k[String(kmax)]) }) : null,
        h("td", {}, gate),
        h("td", { class: "num", text: S.tool_errors }),
        h("td", { class: "num", text: fmt(S.mean_steps, 2) }));
    });
    sec.append(h("table", { class: "grid", id: "summary-table" },
      h("thead", {}, h("tr", {}, head.map((x) => h("th", { text: x })))), h("tbody", {}, rows)));
    sec.append(h("h2", { text: "Episodes by status", style: "margin-top:16px" }),
      h("table", { class: "grid", id: "status-table" },
        h("thead", {}, h("tr", {}, h("th", { text: "run" }), D.statuses.map((st) => h("th", { class: "num" }, h("span", { class: "swatch", style: `background:${SCOLORS[st]}` }), st)))),
        h("tbody", {}, RUNS.map((run, r) => h("tr", {}, h("td", {}, swatch(r), run.label), D.statuses.map((st) => h("td", { class: "num", text: run.summary.status_counts[st] || 0 })))))));
    const names = [...new Set(RUNS.flatMap((r) => Object.keys(r.components)))];
    if (names.length) {
      sec.append(h("h2", { text: "Reward components (mean over scored episodes)", style: "margin-top:16px" }),
        h("table", { class: "grid" }, h("thead", {}, h("tr", {}, h("th", { text: "run" }), names.map((n) => h("th", { class: "num", text: n })))),
          h("tbody", {}, RUNS.map((run, r) => h("tr", {}, h("td", {}, swatch(r), run.label),
            names.map((n) => h("td", { class: "num", text: fmt(run.components[n]) })))))));
    }
    for (const run of RUNS) {
      const G = run.summary.gate;
      if (G && G.failed_tasks.length) sec.append(h("p", { class: "error", text: `${run.label}: must-pass tasks failed: ${G.failed_tasks.join(", ")}` }));
      for (const n of run.notes) sec.append(h("p", { class: "note", text: n }));
    }
  }

  /* ---------- comparisons ---------- */
  if (D.comparisons.length) {
    const sec = section("compare", `Paired comparisons against ${RUNS[0].label}`);
    sec.append(h("table", { class: "grid", id: "compare-table" },
      h("thead", {}, h("tr", {}, ["B", "shared tasks", "B − A", `${pct} CI`, "p-value", "test", "verdict"].map((x) => h("th", { text: x })))),
      h("tbody", {}, D.comparisons.map((c) => c.error
        ? h("tr", {}, h("td", { text: c.label_b }), h("td", { colspan: 6, class: "error", text: c.error }))
        : h("tr", {}, h("td", { text: c.label_b }), h("td", { class: "num", text: c.n_shared }),
          h("td", { class: "num", text: fmt(c.paired.diff * c.scale, c.unit ? 1 : 3) }),
          h("td", { class: "num", text: c.paired.low === null ? "–" : `${fmt(c.paired.low * c.scale, c.unit ? 1 : 3)} to ${fmt(c.paired.high * c.scale, c.unit ? 1 : 3)}` }),
          h("td", { class: "num", text: c.p_value === null ? "–" : c.p_value.toPrecision(2) }),
          h("td", { text: c.test }), h("td", { class: "verdict", text: c.verdict }))))));
  }

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
    const top = Math.max(0.05, ...hists.flat());
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

  /* ---------- agents ---------- */
  {
    const sec = section("agents", "Agents and run settings");
    RUNS.forEach((run, r) => sec.append(h("div", { class: "agent" },
      h("h3", {}, swatch(r), `${run.label}: ${run.agent.name} on ${run.env_id}`, h("span", { class: "ci", text: ` ${run.path}` })),
      h("pre", { class: "agent-spec", text: JSON.stringify(run.agent) }),
      h("pre", { class: "ci", text: "$ " + (run.info.command || []).join(" ") }),
      jsonBlock("run settings (run.json)", run.info, false))));
  }

  /* ---------- trajectory viewer ---------- */
  const viewer = (() => {
    const sec = section("viewer", "Trajectories: pick a task and a sample, then step through the episode");
    const runSel = h("select", { id: "viewer-run" }, RUNS.map((run, r) => h("option", { value: r, text: run.label })));
    const q = h("input", { id: "viewer-filter", placeholder: "filter task ids", size: 24 });
    const outcome = h("select", { id: "viewer-outcome" },
      [["all", "all tasks"], ["fail", "with a failure"], ["pass", "with a pass"], ["excluded", "with an excluded episode"]].map(([v, t]) => h("option", { value: v, text: t })));
    const list = h("div", { id: "task-list" });
    const samples = h("div", { class: "samples", id: "viewer-samples" });
    const pane = h("div", { id: "episode" }, h("div", { class: "empty", text: "Pick a task on the left, or click a cell of the heatmap." }));
    sec.append(h("div", { class: "controls" }, "run ", runSel, q, outcome),
      h("div", { class: "viewer" }, list, h("div", {}, samples, pane)));
    const st = { r: 0, t: null, row: null, step: 0, all: false, ep: null };
    const LIMIT = 300;

    function rowsOf(run) {
      if (!run.rows) {
        run.rows = new Map();
        run.ep.task.forEach((t, i) => { if (!run.rows.has(t)) run.rows.set(t, []); run.rows.get(t).push(i); });
      }
      return run.rows;
    }
    function episode(r, row) {
      const run = RUNS[r];
      if (!run.lines) run.lines = document.getElementById("envlab-episodes-" + r).textContent.split("\n");
      return JSON.parse(run.lines[row]);
    }
    function renderList() {
      const run = RUNS[st.r], rows = rowsOf(run), b = run.byTask;
      const needle = q.value.trim().toLowerCase(), want = outcome.value;
      list.replaceChildren();
      let shown = 0, matched = 0;
      for (const t of rows.keys()) {
        if (needle && !D.tasks[t].toLowerCase().includes(needle)) continue;
        if (want === "fail" && b.pass[t] === b.n[t]) continue;
        if (want === "pass" && b.pass[t] === 0) continue;
        if (want === "excluded" && b.tot[t] === b.n[t]) continue;
        matched++;
        if (shown >= LIMIT) continue;
        shown++;
        list.append(h("div", { class: "item" + (t === st.t ? " sel" : ""), "data-task": D.tasks[t], onclick: () => open(st.r, t, null, false) },
          h("span", { text: D.tasks[t] }), h("span", { class: "ci", text: `${b.pass[t]}/${b.n[t]} pass` })));
      }
      if (matched > shown) list.append(h("div", { class: "more", text: `${matched - shown} more tasks: type in the filter to find them` }));
      if (!matched) list.append(h("div", { class: "more", text: "no task matches" }));
    }
    function open(r, t, sample, scroll) {
      if (r !== st.r) { st.r = r; runSel.value = String(r); }
      st.t = t;
      const run = RUNS[r], rows = rowsOf(run).get(t) || [];
      samples.replaceChildren(h("span", { class: "ci", text: `${D.tasks[t]} · ${run.label}: ` }));
      if (!rows.length) {
        pane.replaceChildren(h("div", { class: "empty", text: `${run.label} has no episode of ${D.tasks[t]}.` }));
        renderList();
        return;
      }
      let pick = rows[0];
      for (const row of rows) {
        const stt = D.statuses[run.ep.status[row]], rew = run.ep.reward[row];
        if (sample !== null && run.ep.sample[row] === sample) pick = row;
        samples.append(h("button", { class: "sample", "data-sample": run.ep.sample[row], onclick: () => show(row) },
          `sample ${run.ep.sample[row]} `, badge(stt), ` ${fmt(rew, 2)}`));
      }
      renderList();
      show(pick);
      if (scroll) sec.scrollIntoView();
    }
    function show(row) {
      st.row = row; st.step = 0; st.ep = episode(st.r, row);
      for (const b of samples.querySelectorAll("button.sample")) b.classList.toggle("on", Number(b.dataset.sample) === RUNS[st.r].ep.sample[row]);
      history.replaceState(null, "", `#ep=${st.r}:${encodeURIComponent(D.tasks[st.t])}:${RUNS[st.r].ep.sample[row]}`);
      renderEpisode();
    }
    const text = (c, run) => (c && typeof c === "object" && !Array.isArray(c) && "$" in c ? run.strings[c.$] : c);
    function contentNodes(c, run) {
      c = text(c, run);
      if (c === null || c === undefined || c === "") return [];
      if (typeof c === "string") return [shellish(c) || h("pre", { text: c })];
      if (Array.isArray(c)) return c.map((p) => h("pre", { text: p && p.type === "text" ? p.text : JSON.stringify(p, null, 2) }));
      return [h("pre", { text: JSON.stringify(c, null, 2) })];
    }
    function shellish(str) {
      // a tool result that is a JSON object of a command's outputs is shown as a terminal
      if (str[0] !== "{") return null;
      let o;
      try { o = JSON.parse(str); } catch (e) { return null; }
      if (!o || typeof o !== "object" || !("stdout" in o || "stderr" in o || "exit_code" in o || "returncode" in o)) return null;
      const code = o.exit_code ?? o.returncode;
      return h("pre", { class: "shell" }, o.stdout || "", o.stderr ? "\n" + o.stderr : "", code !== undefined ? `\n[exit ${code}]` : "");
    }
    function compact(obj) {
      const one = JSON.stringify(obj);
      return one && one.length <= 100 ? one : JSON.stringify(obj, null, 2);
    }
    function callNode(call) {
      const f = call.function || call;
      let args = f.arguments;
      try { args = typeof args === "string" ? JSON.parse(args) : args; } catch (e) { /* shown as written */ }
      const cmd = args && typeof args === "object" ? args.command ?? args.cmd ?? args.script ?? args.code : null;
      const rest = args && typeof args === "object" && cmd !== null && cmd !== undefined ? Object.fromEntries(Object.entries(args).filter(([k]) => !["command", "cmd", "script", "code"].includes(k))) : null;
      return h("div", { class: "call" }, h("b", { text: "→ " + (f.name || "?") }), call.id ? h("span", { class: "ci", text: " " + call.id }) : null,
        typeof cmd === "string" ? h("pre", { class: "shell", text: "$ " + cmd }) : null,
        typeof cmd === "string" ? (rest && Object.keys(rest).length ? h("pre", { text: JSON.stringify(rest, null, 2) }) : null)
          : h("pre", { text: typeof args === "string" ? args : compact(args) }));
    }
    function messageNode(m, run) {
      const role = m.role || "?";
      return h("div", { class: "msg " + role },
        h("div", { class: "role" }, role, m.name ? h("span", { class: "ci", text: ` · ${m.name}` }) : null, m.tool_call_id ? h("span", { class: "ci", text: ` · ${m.tool_call_id}` }) : null),
        contentNodes(m.content, run), (m.tool_calls || []).map(callNode));
    }
    function stepNode(e, i, run) {
      const stp = e.steps[i], end = i + 1 < e.steps.length ? e.steps[i + 1].m : e.messages.length;
      const extra = Object.fromEntries(Object.entries(stp.info || {}).filter(([k]) => k !== "tool_errors"));
      const info = Object.keys(extra).length ? JSON.stringify(extra) : "";
      return h("div", { class: "step", "data-step": i },
        h("div", { class: "step-head" }, h("b", { text: `Step ${i + 1} of ${e.steps.length}` }), h("span", { text: `reward ${fmt(stp.r)}` }),
          stp.te ? h("span", { class: "error", text: `${stp.te} tool error(s)` }) : null, h("span", { text: `agent ${fmt(stp.as, 3)}s · env ${fmt(stp.es, 3)}s` })),
        e.messages.slice(stp.m, end).map((m) => messageNode(m, run)),
        info ? jsonBlock("environment info of this step", extra, info.length < 600) : null,
        stp.ai ? jsonBlock("agent info of this step", stp.ai, false) : null);
    }
    function renderEpisode() {
      const e = st.ep, run = RUNS[st.r];
      const comps = Object.entries(e.comp || {});
      const head = h("div", { class: "episode-head" },
        h("div", {}, badge(e.status), h("b", { text: ` reward ${fmt(e.reward)} ` }), h("span", { class: "ci", text: e.id })),
        h("dl", {},
          h("dt", { text: "task / sample" }), h("dd", { text: `${e.task} / ${e.sample} (seed ${e.seed}, attempts ${e.attempts})` }),
          comps.length ? [h("dt", { text: "reward components" }), h("dd", { class: "components" }, comps.map(([k, v]) => h("span", { style: "margin-right:12px" }, `${k}: `, h("b", { text: fmt(v) }))))] : null,
          e.gated_by ? [h("dt", { text: "zeroed by gate" }), h("dd", { class: "error", text: e.gated_by })] : null,
          h("dt", { text: "time" }), h("dd", { text: `${fmt(e.time.duration_s, 3)}s (agent ${fmt(e.time.agent_s, 3)}s, env ${fmt(e.time.env_s, 3)}s, grade ${fmt(e.time.grade_s, 3)}s)` }),
          e.tokens ? [h("dt", { text: "tokens" }), h("dd", { text: `${e.tokens.prompt} prompt, ${e.tokens.completion} completion` })] : null),
        e.error ? h("pre", { class: "error", text: e.error }) : null,
        e.info ? jsonBlock("episode info", e.info, false) : null);
      const n = e.steps.length;
      const prelude = e.messages.slice(0, n ? e.steps[0].m : e.messages.length).map((m) => messageNode(m, run));
      const prev = h("button", { id: "step-prev", text: "◀ prev", disabled: st.all || st.step === 0 || null, onclick: () => go(st.step - 1) });
      const next = h("button", { id: "step-next", text: "next ▶", disabled: st.all || st.step >= n - 1 || null, onclick: () => go(st.step + 1) });
      const all = h("button", { id: "step-all", class: st.all ? "on" : "", text: "all steps", onclick: () => { st.all = !st.all; renderEpisode(); } });
      const where = h("span", { id: "step-pos", text: n ? (st.all ? `${n} steps` : `step ${st.step + 1} / ${n}`) : "no steps" });
      const steps = h("div", { id: "steps" }, n ? (st.all ? e.steps.map((_, i) => stepNode(e, i, run)) : stepNode(e, st.step, run)) : h("div", { class: "empty", text: "The episode ended before its first step." }));
      pane.replaceChildren(head, h("details", { open: true }, h("summary", { text: "prompt" }), prelude),
        h("div", { class: "controls" }, prev, where, next, all, h("span", { class: "ci", text: "← → keys step" })), steps);
    }
    function go(i) {
      if (!st.ep) return;
      st.step = Math.max(0, Math.min(st.ep.steps.length - 1, i));
      renderEpisode();
    }
    document.addEventListener("keydown", (ev) => {
      if (!st.ep || st.all || /INPUT|SELECT|TEXTAREA/.test(document.activeElement?.tagName || "")) return;
      if (ev.key === "ArrowRight") go(st.step + 1);
      else if (ev.key === "ArrowLeft") go(st.step - 1);
    });
    runSel.addEventListener("change", () => { st.r = Number(runSel.value); st.t = null; renderList(); });
    q.addEventListener("input", renderList);
    outcome.addEventListener("change", renderList);
    renderList();
    return { open, renderList };
  })();

  heat.draw();
  const m = /^#ep=(\d+):([^:]*):(\d+)$/.exec(location.hash);
  if (m && RUNS[Number(m[1])]) {
    const t = D.tasks.indexOf(decodeURIComponent(m[2]));
    if (t >= 0) viewer.open(Number(m[1]), t, Number(m[3]), true);
  }
  window.envlabReport = { ready: true, renderMs: performance.now() - T0, runs: RUNS.length, tasks: NT };
  document.body.dataset.ready = "1";
})();
