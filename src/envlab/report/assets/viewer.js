/* envlab report, viewer.js: agent specs and the trajectory viewer; start-up.
   Concatenated by envlab.report.html inside one function scope with "use strict":
   base.js, charts.js, viewer.js share its constants and helpers. */
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
      // a command's output is shown as a terminal: the text of a task folder's run tool
      // ("exit code: N", "stdout:", "stderr:"), or a JSON object with stdout/stderr/exit_code
      if (/^exit code: -?\d+/.test(str)) return h("pre", { class: "shell", text: str });
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
        h("div", { class: "step-head" }, h("b", { text: `Step ${i + 1} of ${e.steps.length}` }), h("span", { text: `reward ${fmt(stp.r)}` }), stp.nm ? h("span", { class: "ci", text: "no model turn" }) : null,
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
          e.grader_failed ? [h("dt", { text: "grader failed (scored 0)" }), h("dd", {}, h("pre", { class: "error grader-failed", text: e.grader_failed }))] : null,
          e.info && e.info.grade && e.info.grade.verifier_exit_code !== undefined ? [h("dt", { text: "verifier" }), h("dd", {}, `test.sh exit code ${e.info.grade.verifier_exit_code}`, h("pre", { class: "verifier-tail", text: e.info.grade.verifier_output_tail || "" }))] : null,
          h("dt", { text: "time" }), h("dd", { text: `${fmt(e.time.duration_s, 3)}s (agent ${fmt(e.time.agent_s, 3)}s, env ${fmt(e.time.env_s, 3)}s, grade ${fmt(e.time.grade_s, 3)}s)` }),
          e.tokens ? [h("dt", { text: "tokens" }), h("dd", { text: `${e.tokens.prompt} prompt, ${e.tokens.completion} completion` })] : null),
        e.error ? h("div", { class: "episode-error" }, h("b", { class: "error", text: e.error.line }),
          e.error.message.trim().includes("\n") ? h("pre", { class: "error", text: e.error.message }) : null) : null,
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
