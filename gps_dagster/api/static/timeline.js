// The timeline page of gps-dagster: windows, effective state per target, desired GPUs vs
// capacity (plotly.js), the table of an instant, and the reservation budget what-if.
// Instants are handled in the schedule's wall time (the API answers in the schedule's offset).
//
// Decisions embodied here (docs/decisions.md):
// * “The timeline page opens at now and at a readable span”
"use strict";
(function () {
  const cfg = JSON.parse(document.getElementById("config").textContent);
  const offset = cfg.now.slice(19);
  const MIN = 60000, HOUR = 3600000, DAY = 86400000;
  // The spans the chart can show, widest first, and the click snap of each (a pixel of a week
  // is ~8 minutes; a 2-minute window needs the hour span to be read).
  const SPANS = { week: 7 * DAY, day: DAY, "6h": 6 * HOUR, "1h": HOUR };
  const SNAPS = { week: 15 * MIN, day: 5 * MIN, "6h": MIN, "1h": 10000 };
  let data = null, instantMs = null, rangeStart = null, span = cfg.span || "week", seq = 0;

  const wall = (iso) => iso.slice(0, 19).replace("T", " ");
  const wallMs = (iso) => {
    const [d, t] = iso.slice(0, 19).split("T");
    const [y, m, dd] = d.split("-").map(Number), [hh, mm, ss] = t.split(":").map(Number);
    return Date.UTC(y, m - 1, dd, hh, mm, ss);
  };
  const nowMs = wallMs(cfg.now);  // the server's clock, in the schedule's wall time
  const msWall = (ms) => new Date(ms).toISOString().slice(0, 19).replace("T", " ");
  const msIso = (ms) => new Date(ms).toISOString().slice(0, 19) + offset;
  const fmt = (n) => n.toLocaleString("en-US");
  const api = (path, body) => fetch(path, body === undefined ? { credentials: "same-origin" } : {
    method: "POST", credentials: "same-origin", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Requested-With": "gps-ui" },
  }).then(async (r) => ({ ok: r.ok, status: r.status, body: await r.json() }));

  function mondayOf(ms) {
    const d = new Date(ms), back = (d.getUTCDay() + 6) % 7;
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) - back * DAY;
  }

  function startFor(anchor, which) {  // the range of ``which`` that shows ``anchor``
    if (which === "week") return mondayOf(anchor);
    if (which === "day") return Math.floor(anchor / DAY) * DAY;
    if (which === "6h") return Math.floor(anchor / HOUR) * HOUR - HOUR;
    return Math.floor(anchor / (5 * MIN)) * 5 * MIN - 10 * MIN;  // 1h: now near the left third
  }

  function readableSpan(doc) {  // the widest span in which the shortest window is >= 1 % wide
    const lengths = doc.windows.flatMap((w) => w.occurrences.map((o) => wallMs(o.end) - wallMs(o.start)));
    if (!lengths.length) return "week";
    const shortest = Math.min(...lengths);
    return Object.keys(SPANS).find((k) => shortest >= SPANS[k] / 100) || "1h";
  }

  function colour(iv) {
    const win = iv.source !== "default";
    if (iv.desired_state === "running") return win ? "#1b7f3b" : "#86c99a";
    return win ? "#b3261e" : "#e6a6a1";
  }

  function traces(doc) {
    const out = [];
    const wins = doc.windows.slice().sort((a, b) => b.priority - a.priority);
    for (const w of wins) {
      const label = `${w.name} · ${w.kind} · p${w.priority}`;
      out.push({  // a zero-width bar keeps the window's row when it has no occurrence this week
        type: "bar", orientation: "h", yaxis: "y3", showlegend: false, hoverinfo: "skip",
        y: [label], base: [msWall(rangeStart)], x: [0], marker: { color: "rgba(0,0,0,0)" },
      });
      out.push({
        type: "bar", orientation: "h", yaxis: "y3", name: label, showlegend: false,
        y: w.occurrences.map(() => label), base: w.occurrences.map((o) => wall(o.start)),
        x: w.occurrences.map((o) => wallMs(o.end) - wallMs(o.start)),
        marker: { color: w.kind === "one_shot" ? "#7b3fb3" : "#3f6fb3" },
        hovertemplate: `${w.name} (${w.kind}, priority ${w.priority})<extra></extra>`,
      });
      const skipped = w.skipped || [];  // occurrences a holiday or a listed date removed
      if (skipped.length) {
        out.push({
          type: "bar", orientation: "h", yaxis: "y3", name: `${w.name} skipped`, showlegend: false,
          y: skipped.map(() => label), base: skipped.map((o) => wall(o.start)),
          x: skipped.map((o) => wallMs(o.end) - wallMs(o.start)),
          text: skipped.map((o) => `${w.name} skipped: ${o.reason}`), textposition: "none",
          marker: { color: "rgba(210,105,30,0.25)", pattern: { shape: "/", fgcolor: "#d2691e" },
            line: { color: "#d2691e", width: 1 } },
          hovertemplate: "%{text}<extra></extra>", meta: "skipped",
        });
      }
    }
    const groups = {};
    for (const [target, ivs] of Object.entries(doc.targets)) {
      for (const iv of ivs) {
        const key = `${iv.desired_state} · ${iv.source === "default" ? "default" : "window"}`;
        const g = groups[key] || (groups[key] = { y: [], base: [], x: [], text: [], color: colour(iv) });
        const end = iv.end || doc.to;
        g.y.push(target); g.base.push(wall(iv.start)); g.x.push(wallMs(end) - wallMs(iv.start));
        g.text.push(`${target}: ${iv.desired_state}${iv.replicas ? " ×" + iv.replicas : ""} by ${iv.source}`);
      }
    }
    const leads = doc.ready_by || [];  // ready-by: the planned early start up to the boundary
    if (leads.length) {
      const y = [], base = [], x = [], text = [];
      for (const l of leads) {
        for (const t of l.acquiring.concat(l.releasing)) {
          y.push(t); base.push(wall(l.early_start)); x.push(wallMs(l.boundary) - wallMs(l.early_start));
          text.push(`${t}: early start ${wall(l.early_start)} (lead ${Math.round(l.lead_s)} s) — ${l.reason}`);
        }
      }
      out.push({ type: "bar", orientation: "h", yaxis: "y2", name: "ready-by lead", y, base, x, text,
        textposition: "none", meta: "ready_by", hovertemplate: "%{text}<extra></extra>",
        marker: { color: "rgba(106,61,154,0.35)", pattern: { shape: "x", fgcolor: "#6a3d9a" } } });
    }
    for (const [key, g] of Object.entries(groups)) {
      out.push({ type: "bar", orientation: "h", yaxis: "y2", name: key, y: g.y, base: g.base, x: g.x,
        text: g.text, textposition: "none", marker: { color: g.color }, hovertemplate: "%{text}<extra></extra>" });
    }
    if (doc.gpu) {
      const xs = [], ys = [], cap = [];
      for (const s of doc.gpu) { xs.push(wall(s.start)); ys.push(s.desired_gpus); cap.push(s.capacity); }
      const last = doc.gpu[doc.gpu.length - 1];
      xs.push(wall(last.end)); ys.push(last.desired_gpus); cap.push(last.capacity);
      out.push({ type: "scatter", mode: "lines", line: { shape: "hv", color: "#1f4e9e", width: 2 },
        name: "desired GPUs", x: xs, y: ys, yaxis: "y" });
      out.push({ type: "scatter", mode: "lines", line: { shape: "hv", color: "#d62728", dash: "dash" },
        name: "pool capacity", x: xs, y: cap, yaxis: "y" });
      const over = doc.gpu.filter((s) => s.overcommit);
      if (over.length) {
        out.push({ type: "scatter", mode: "markers", marker: { color: "#d62728", size: 10, symbol: "x" },
          name: "overcommit", x: over.map((s) => wall(s.start)), y: over.map((s) => s.desired_gpus), yaxis: "y" });
      }
    }
    return out;
  }

  function layout(doc) {
    const shapes = [];
    if (nowMs >= rangeStart && nowMs < rangeStart + SPANS[span]) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: msWall(nowMs), x1: msWall(nowMs),
        y0: 0, y1: 1, line: { color: "#1f4e9e", width: 2 }, name: "now" });
    }
    if (instantMs !== null) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: msWall(instantMs), x1: msWall(instantMs),
        y0: 0, y1: 1, line: { color: "#222", width: 1, dash: "dot" } });
    }
    for (const s of doc.gpu || []) {
      if (s.overcommit) shapes.push({ type: "rect", xref: "x", yref: "y", x0: wall(s.start), x1: wall(s.end),
        y0: s.capacity, y1: s.desired_gpus, fillcolor: "rgba(214,39,40,0.25)", line: { width: 0 } });
    }
    const days = new Set((doc.skipped || []).map((k) => k.date));  // holidays: the whole local day
    for (const d of days) {
      const from = wallMs(`${d}T00:00:00`);
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: msWall(from), x1: msWall(from + DAY),
        y0: 0, y1: 1, fillcolor: "rgba(210,105,30,0.08)", line: { width: 0 }, layer: "below",
        name: `skipped ${d}` });
    }
    return {
      barmode: "overlay", dragmode: false, hovermode: "closest", height: 640, showlegend: true,
      margin: { l: 240, r: 20, t: 20, b: 40 }, legend: { orientation: "h", y: -0.08 },
      xaxis: { type: "date", range: [msWall(rangeStart), msWall(rangeStart + SPANS[span])], anchor: "y" },
      yaxis: { domain: [0, 0.28], title: { text: "GPUs" }, rangemode: "tozero" },
      yaxis2: { domain: [0.36, 0.66], type: "category", autorange: "reversed" },
      yaxis3: { domain: [0.74, 1], type: "category" },
      shapes,
    };
  }

  function activeAt(ms, ivs) {
    return ivs.find((iv) => wallMs(iv.start) <= ms && ms < wallMs(iv.end || data.to));
  }

  function note(target, iv, ms) {
    const parts = [];
    const others = data.windows.filter((w) => w.name !== iv.source && w.targets.includes(target) &&
      w.occurrences.some((o) => wallMs(o.start) <= ms && ms < wallMs(o.end)));
    const mine = data.windows.find((w) => w.name === iv.source);
    for (const w of others) parts.push(`overrides ${w.name} (priority ${w.priority} < ${mine ? mine.priority : "?"})`);
    for (const w of data.windows.filter((w) => w.targets.includes(target))) {
      const k = (w.skipped || []).find((o) => wallMs(o.start) <= ms && ms < wallMs(o.end));
      if (k) parts.push(`${w.name} skipped: ${k.reason}`);
    }
    if (iv.source === "default") parts.push("no window in force: the target's default");
    if (iv.allow_downtime && iv.desired_state === "stopped") parts.push("downtime allowed");
    if (iv.replicas) parts.push(`${iv.replicas} replica(s)`);
    return parts.join("; ");
  }

  function showInstant(ms) {
    instantMs = ms;
    document.getElementById("instant-label").textContent = msWall(ms) + " " + offset;
    const body = document.querySelector("#instant tbody");
    body.innerHTML = "";
    for (const [target, ivs] of Object.entries(data.targets)) {
      const iv = activeAt(ms, ivs);
      const tr = document.createElement("tr");
      tr.dataset.target = target;
      const cells = iv ? [target, iv.desired_state + (iv.replicas ? ` ×${iv.replicas}` : ""), iv.source,
        note(target, iv, ms)] : [target, "—", "—", "outside the range"];
      cells.forEach((c, i) => {
        const td = document.createElement("td");
        td.className = ["target", "desired", "decided-by", "note"][i];
        td.textContent = c;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    Plotly.relayout("chart", { shapes: layout(data).shapes });
    document.querySelectorAll(".reservation").forEach((el) => el.dispatchEvent(new Event("recheck")));
  }

  function warnings(doc) {
    const el = document.getElementById("warnings");
    const over = (doc.gpu || []).filter((s) => s.overcommit);
    el.innerHTML = over.length ? "<p class=\"error\">Overcommit: " + over.map((s) =>
      `${s.desired_gpus} GPUs desired &gt; capacity ${s.capacity} from ${wall(s.start)} to ${wall(s.end)}`)
      .join("; ") + "</p>" : "";
  }

  async function load() {
    const from = msIso(rangeStart), to = msIso(rangeStart + SPANS[span]);
    document.getElementById("week").value = from.slice(0, 10);
    document.getElementById("span").value = span;
    document.getElementById("range").textContent = `${wall(from)} → ${wall(to)} (${cfg.timezone})`;
    const enc = encodeURIComponent;
    const res = await api(`${cfg.schedules}/${enc(cfg.name)}/timeline?from=${enc(from)}&to=${enc(to)}`);
    if (!res.ok) { document.getElementById("warnings").textContent = res.body.message + " — " + res.body.fix; return; }
    data = res.body;
    await Plotly.react("chart", traces(data), layout(data), { displayModeBar: false, responsive: true, doubleClick: false });
    warnings(data);
    const start = rangeStart, end = rangeStart + SPANS[span];
    const inRange = (ms) => ms !== null && ms >= start && ms < end;
    showInstant(inRange(instantMs) ? instantMs : inRange(nowMs) ? nowMs : start);
    document.body.dataset.span = span;
    document.body.dataset.loaded = data.from;
  }

  function clientX(wallText) {
    const gd = document.getElementById("chart"), xa = gd._fullLayout.xaxis;
    const ms = wallMs(wallText.replace(" ", "T"));
    return Math.round(gd.getBoundingClientRect().left + xa._offset + xa.c2p(ms));  // events carry whole pixels
  }

  document.getElementById("chart").addEventListener("click", (ev) => {
    const gd = document.getElementById("chart"), xa = gd._fullLayout && gd._fullLayout.xaxis;
    if (!xa || !data) return;
    const px = ev.clientX - gd.getBoundingClientRect().left - xa._offset;
    if (px < 0 || px > xa._length) return;
    showInstant(Math.round(xa.p2c(px) / SNAPS[span]) * SNAPS[span]);
  });
  document.getElementById("prev-week").onclick = () => { rangeStart -= SPANS[span]; load(); };
  document.getElementById("next-week").onclick = () => { rangeStart += SPANS[span]; load(); };
  document.getElementById("week").onchange = (ev) => {
    if (!ev.target.value) return;
    const day = wallMs(ev.target.value + "T00:00:00");
    rangeStart = span === "week" ? mondayOf(day) : day;
    load();
  };
  document.getElementById("span").onchange = (ev) => {
    span = ev.target.value;
    rangeStart = startFor(instantMs !== null ? instantMs : nowMs, span);
    load();
  };
  document.getElementById("now").onclick = () => { instantMs = nowMs; rangeStart = startFor(nowMs, span); load(); };

  async function reservation(id) {
    const res = await api(`${cfg.reservationsBase}/${encodeURIComponent(id)}`);
    if (!res.ok) return;
    const r = res.body, box = document.createElement("div");
    box.className = "reservation"; box.id = `rsv-${id}`;
    box.innerHTML = `<h2>Reservation ${id}</h2><p>${r.mode} on ${r.node} · ${r.gpus.length} GPU ·
      budget <b>${fmt(r.budget_mib)} MiB</b> = ${fmt(r.gpu_memory_mib)} MiB × ${r.headroom}</p>
      <div class="rsv-chart" id="rsv-chart-${id}"></div>
      <label>Member <select class="member"></select></label>
      <label>memory_mib <input class="slider" type="range" min="1" max="${r.gpu_memory_mib}" step="1"></label>
      <output class="mib"></output> <span class="total"></span><p class="verdict" aria-live="polite"></p>`;
    document.getElementById("reservations").appendChild(box);
    const select = box.querySelector(".member"), slider = box.querySelector(".slider");
    for (const m of r.members) {
      const o = document.createElement("option");
      o.value = m.deploy_id; o.textContent = `${m.deploy_id} (${fmt(m.memory_mib || 0)} MiB)`;
      select.appendChild(o);
    }
    const memberMib = () => (r.members.find((m) => m.deploy_id === select.value) || {}).memory_mib || 1;
    slider.value = memberMib();
    async function check() {
      const mine = ++seq, mib = Number(slider.value);
      box.querySelector(".mib").textContent = `${fmt(mib)} MiB`;
      const at = instantMs === null ? undefined : msIso(instantMs);
      const ans = await api(`${cfg.reservationsBase}/${encodeURIComponent(id)}:admission-check`,
        { deploy_id: select.value, memory_mib: mib, at, schedule: cfg.name });
      if (mine !== seq || !ans.ok) return;
      const a = ans.body, v = box.querySelector(".verdict");
      box.querySelector(".total").textContent = `total ${fmt(a.total_mib)} MiB of ${fmt(a.budget_mib)} MiB`;
      v.textContent = a.admitted ? `admitted: ${fmt(a.total_mib)} MiB ≤ ${fmt(a.budget_mib)} MiB budget`
        : `refused: ${a.reason} — ${a.fix}`;
      v.className = "verdict " + (a.admitted ? "ok" : "bad");
      box.dataset.verdict = a.admitted ? "admitted" : "refused";
      box.dataset.total = a.total_mib;
      const others = a.members.filter((m) => m.state === "running" && m.deploy_id !== a.deploy_id);
      const bars = others.map((m) => ({ type: "bar", orientation: "h", name: m.deploy_id, y: ["members"],
        x: [m.memory_mib || 0], hovertemplate: `${m.deploy_id}: %{x} MiB<extra></extra>` }));
      bars.push({ type: "bar", orientation: "h", name: `${a.deploy_id} (proposed)`, y: ["members"],
        x: [a.memory_mib], marker: { color: a.admitted ? "#1b7f3b" : "#b3261e" } });
      // the stack can pass the GPU's memory (that is what a refusal looks like): never clip it
      const top = Math.max(r.gpu_memory_mib, r.budget_mib, a.total_mib) * 1.05;
      box.dataset.axisMax = Math.round(top);
      Plotly.react(`rsv-chart-${id}`, bars, { barmode: "stack", height: 200, margin: { l: 80, r: 20, t: 10, b: 50 },
        xaxis: { range: [0, top], title: { text: "MiB" } }, dragmode: false,
        shapes: [{ type: "line", x0: r.budget_mib, x1: r.budget_mib, yref: "paper", y0: 0, y1: 1,
          line: { color: "#d62728", width: 2 } }] }, { displayModeBar: false });
    }
    select.onchange = () => { slider.value = memberMib(); check(); };
    slider.oninput = check;
    box.addEventListener("recheck", check);
    check();
  }

  window.gpsTimeline = { clientX, showInstant: (w) => showInstant(wallMs(w.replace(" ", "T"))) };
  const weekMs = cfg.week ? mondayOf(wallMs(cfg.week + "T00:00:00")) : null;
  const anchor = weekMs === null || (nowMs >= weekMs && nowMs < weekMs + 7 * DAY) ? nowMs : weekMs;
  rangeStart = startFor(anchor, span);
  async function open() {  // no ?span=: the week first, then the span its shortest window needs
    await load();
    if (cfg.span) return;
    const wanted = readableSpan(data);
    if (wanted !== span) { span = wanted; rangeStart = startFor(anchor, span); await load(); }
  }
  open().then(() => cfg.reservations.forEach(reservation));
})();
