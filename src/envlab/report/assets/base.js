/* envlab report: draws the summary, charts, heatmap and trajectory viewer from the embedded data.
   No libraries, no network. Episodes are parsed only when opened; the heatmap and the task list
   draw only what is visible, so a run of 10,000 episodes stays responsive. */

/* envlab report, base.js: data, helpers, layout, summary and comparison tables.
   Concatenated by envlab.report.html inside one function scope with "use strict":
   base.js, charts.js, viewer.js share its constants and helpers. */
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

  /* ---------- per-task numbers of every run ---------- */
  for (const run of RUNS) {
    const sum = new Float64Array(NT), n = new Int32Array(NT), pass = new Int32Array(NT), tot = new Int32Array(NT);
    const ep = run.ep;
    for (let i = 0; i < ep.task.length; i++) {
      const t = ep.task[i], r = ep.reward[i];
      tot[t]++;
      if (r !== null && !UNSCORED.has(D.statuses[ep.status[i]])) {
        sum[t] += r; n[t]++;
        pass[t] += ep.pass[i]; // judged by envlab.measure.is_pass when the report was built
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
      `mean reward (${pct} CI)`, `pass rate (${pct} CI)`, "pass@1", kmax > 1 ? "pass^k (k = samples)" : null,
      "gate", "grader failed (scored 0)", "model failures", "tool errors", "mean steps"].filter((x) => x !== null);
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
        kmax > 1 ? h("td", { class: "num", text: S.samples_per_task > 1 ? `${fmt(S.pass_hat_k[String(S.samples_per_task)])} (k=${S.samples_per_task})` : "–" }) : null,
        h("td", {}, gate),
        h("td", { class: "num", text: S.n_grader_failed || 0 }),
        h("td", { class: "num", title: "the agent's model endpoint failed past its retries" },
          `${S.n_model_failed || 0} `,
          h("span", { class: S.model_failures === "exclude" ? "error" : "ci",
            text: S.model_failures === "exclude" ? "(excluded: --model-failures exclude)" : "(scored 0)" })),
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
    const failures = RUNS.flatMap((run, r) => Object.entries(run.first_errors || {}).map(([st, line]) =>
      h("tr", {}, h("td", {}, swatch(r), run.label), h("td", {}, st === "grader_failed" ? "grader failed" : badge(st)), h("td", {}, h("code", { class: "error", text: line })))));
    if (failures.length) {
      sec.append(h("h2", { text: "First error of each failure", style: "margin-top:16px" }),
        h("table", { class: "grid", id: "errors-table" }, h("thead", {}, h("tr", {}, ["run", "status", "kind in phase: what happened"].map((x) => h("th", { text: x })))),
          h("tbody", {}, failures)));
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

