// segcoord dashboard: polls three JSON answers every 2 s (while the tab is visible) and redraws.
// Every text from the server goes in with textContent, never as HTML.
"use strict";

const API = "/segcoord/v1";
const EVERY_MS = 2000;
const STATES = ["visible", "standby", "overshadowed", "offline"];
const KEEP = 50;
const page = { ds: decodeURIComponent(location.hash.slice(1)) || null, seq: 0,
               feeds: { commands: [], visibility: [] } };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + " " + units[i];
}

function clock(ms) { return new Date(ms).toISOString().slice(11, 19); }

function shortTime(iso) {  // 2026-01-01T00:00:00.000Z -> 2026-01-01 00:00 (UTC)
  return iso.slice(0, 10) + " " + iso.slice(11, 16);
}

function interval(iso) {  // start/end -> "2026-11-21 00:00 → 2026-11-22 00:00"
  const [a, b] = iso.split("/");
  return shortTime(a) + " → " + shortTime(b);
}

function compactInterval(a, b) {  // "2026-11-23→11-24" (whole days), "2026-11-23 01:00→02:00" (within a day)
  const midnight = a.slice(11, 23) === "00:00:00.000" && b.slice(11, 23) === "00:00:00.000";
  const start = midnight ? a.slice(0, 10) : shortTime(a);
  const end = midnight ? b.slice(0, 10) : shortTime(b);
  if (!midnight && end.slice(0, 10) === start.slice(0, 10)) return start + "→" + end.slice(11);
  return start + "→" + (end.slice(0, 5) === start.slice(0, 5) ? end.slice(5) : end);
}

function segmentLabel(id) {  // dataSource_start_end_version[_partition] -> a short label (the id goes in the title)
  const m = /^(.+?)_(\d{4}-\d\d-\d\dT[\d:.]+Z)_(\d{4}-\d\d-\d\dT[\d:.]+Z)_(.+?)(?:_(\d+))?$/.exec(id || "");
  if (!m) return id || "";
  return `${m[1]} ${compactInterval(m[2], m[3])} ${m[4]}` + (m[5] ? ` #${m[5]}` : "");
}

function bar(fraction, label, extra) {
  const pct = Math.max(0, Math.min(1, fraction)) * 100;
  const cls = "bar" + (extra ? " " + extra : "") + (!extra && pct >= 95 ? " full" : !extra && pct >= 80 ? " warn" : "");
  return el("div", { class: cls, role: "meter", "aria-valuenow": pct.toFixed(0) },
            el("span", { style: "width:" + pct.toFixed(1) + "%" }), el("em", {}, label));
}

async function getJson(path) {
  const resp = await fetch(path, { cache: "no-store" });
  if (!resp.ok) throw new Error(path + ": HTTP " + resp.status);
  return resp.json();
}

function drawTiers(tiers) {
  const box = document.getElementById("tiers");
  if (!tiers.length) { box.replaceChildren(el("p", { class: "empty" }, "No server has joined yet.")); return; }
  box.replaceChildren(...tiers.map(t => {
    const facts = el("span", { class: "tier-facts" },
      `${t.servers.length} server${t.servers.length === 1 ? "" : "s"} · ${bytes(t.currSize)} of ${bytes(t.maxSize)}` +
      ` · ${t.segments} segments to serve · `);
    facts.append(el("span", { class: t.unavailable ? "bad" : "" }, `${t.unavailable} unavailable`), " · ",
                 el("span", { class: t.underReplicated ? "bad" : "" }, `${t.underReplicated} under-replicated`));
    const rows = t.servers.map(s => el("div", { class: "server", "data-server": s.name },
      el("span", { class: "server-name", title: s.name }, s.name),
      bar(s.maxSize ? s.currSize / s.maxSize : 0, `${bytes(s.currSize)} / ${bytes(s.maxSize)}`),
      el("span", { class: "server-facts" }, `${s.segments} segments · queue: ${s.segmentsToLoad} load, ${s.segmentsToDrop} drop`,
         ...(s.decommissioning ? [el("span", { class: "badge decommissioning" }, "draining")] : []))));
    if (!rows.length) rows.push(el("p", { class: "empty" }, "No server in this tier: its segments cannot load."));
    return el("div", { class: "tier", "data-tier": t.tier },
              el("div", { class: "tier-head" }, el("span", { class: "tier-name" }, t.tier), facts), ...rows);
  }));
}

function drawDataSources(sources) {
  const body = document.querySelector("#datasources tbody");
  if (!sources.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "empty" }, "No used segment yet.")));
  } else {
    body.replaceChildren(...sources.map(d => {
      const row = el("tr", { "data-datasource": d.name, "data-loaded": d.loaded.toFixed(1),
                             class: d.name === page.ds ? "selected" : "" },
        el("td", {}, d.name), el("td", { class: "num" }, d.segments), el("td", { class: "num" }, bytes(d.size)),
        el("td", { class: "num" }, d.replicas), el("td", { class: "num" }, d.unavailable),
        el("td", {}, bar(d.loaded / 100, d.loaded.toFixed(1) + " % loaded", "loaded")));
      row.addEventListener("click", () => choose(d.name));
      return row;
    }));
  }
  const select = document.getElementById("ds-select");
  const names = sources.map(d => d.name);
  if (page.ds && !names.includes(page.ds)) names.unshift(page.ds);
  if (!page.ds && names.length) page.ds = names[0];
  if ([...select.options].map(o => o.value).join("\n") !== names.join("\n")) {
    select.replaceChildren(...names.map(n => el("option", { value: n }, n)));
  }
  if (page.ds) select.value = page.ds;
}

function drawLegend(counts) {
  document.getElementById("legend").replaceChildren(...STATES.map(s =>
    el("span", { "data-count": s }, el("i", { class: "swatch " + s }), `${s} ${counts ? counts[s] : 0}`)));
}

function drawTimeline(tl) {
  drawLegend(tl && tl.counts);
  const chart = document.getElementById("timeline-chart");
  const body = document.querySelector("#segments tbody");
  const note = document.getElementById("timeline-note");
  const segs = tl ? tl.segments : [];
  if (!segs.length) {
    chart.replaceChildren(el("p", { class: "empty" }, page.ds ? `No known segment of ${page.ds}.` : "No data source yet."));
    body.replaceChildren();
    note.textContent = "";
    return;
  }
  const spans = segs.map(s => s.interval.split("/").map(Date.parse));
  const lo = Math.min(...spans.map(x => x[0])), hi = Math.max(...spans.map(x => x[1]));
  // lanes: 0 holds each time chunk's newest version, lane n the versions n steps older in that chunk
  const lane = segs.map((s, i) => new Set(segs.filter((o, j) => o.version > s.version &&
    spans[j][0] < spans[i][1] && spans[i][0] < spans[j][1]).map(o => o.version)).size);
  const cells = new Map();  // lane -> "version interval" -> {span, version, parts}
  segs.forEach((s, i) => {
    if (!cells.has(lane[i])) cells.set(lane[i], new Map());
    const key = s.version + " " + s.interval, byChunk = cells.get(lane[i]);
    if (!byChunk.has(key)) byChunk.set(key, { span: spans[i], version: s.version, parts: [] });
    byChunk.get(key).parts.push(s);
  });
  const lanes = [...cells.keys()].sort((a, b) => a - b);
  const rows = lanes.map(n => el("div", { class: "chart-row" },
    el("span", { class: "chart-label" }, n === 0 ? "newest version" : `${n} version${n === 1 ? "" : "s"} older`),
    el("div", { class: "chart-lane" }, ...[...cells.get(n).values()].map(c => {
      const left = (c.span[0] - lo) / (hi - lo) * 100, width = (c.span[1] - c.span[0]) / (hi - lo) * 100;
      const tip = c.parts.map(p => `${p.segment}: ${p.state}` + (p.servers.length ? ` on ${p.servers.join(", ")}` : ""));
      return el("div", { class: "cell", title: tip.join("\n"), style: `left:${left}%;width:${width}%` },
                ...c.parts.map(p => el("i", { class: "stripe " + p.state })),
                ...(width >= 6 ? [el("b", {}, c.version)] : []));  // a label only where it fits
    }))));
  const axis = el("div", { class: "axis" }, el("span", {}),
                  el("div", {}, el("span", {}, shortTime(new Date(lo).toISOString())),
                     el("span", {}, shortTime(new Date(hi).toISOString()) + " UTC")));
  chart.replaceChildren(...rows, axis);
  body.replaceChildren(...segs.map(s => el("tr", { "data-segment": s.segment, "data-state": s.state,
                                                   "data-servers": s.servers.join(",") },
    el("td", { class: "mono", title: s.interval }, interval(s.interval)), el("td", { class: "mono" }, s.version),
    el("td", { class: "num" }, s.partition), el("td", {}, el("span", { class: "state " + s.state }, s.state)),
    el("td", { class: "num" }, bytes(s.size)),
    el("td", { class: "mono" }, s.servers.length ? s.servers.join(", ") : "—"))));
  note.textContent = tl.truncated ? `Showing the newest ${segs.length} of ${tl.total} segments.`
                                  : `${tl.total} segment${tl.total === 1 ? "" : "s"}; hover a cell for its ids.`;
}

function drawFeeds(recent) {
  for (const name of ["commands", "visibility"]) {
    const feed = page.feeds[name];
    feed.push(...recent[name]);
    feed.sort((a, b) => b.at - a.at || b.seq - a.seq);
    feed.length = Math.min(feed.length, KEEP);
    const list = document.getElementById(name);
    if (!feed.length) { list.replaceChildren(el("li", { class: "empty" }, "None yet.")); continue; }
    list.replaceChildren(...feed.map(e => name === "commands" ? commandItem(e) : visibilityItem(e)));
  }
}

function commandItem(e) {
  const action = e.action || e.type;
  const why = e.reason ? `${e.stage ? e.stage + ": " : ""}${e.reason}` : "";
  return el("li", { "data-action": action, "data-segment": e.segment || "", "data-server": e.server || "", title: (e.segment || "") + (why ? "\n" + why : "") },
    el("time", {}, clock(e.at)), el("span", { class: "what act-" + action.replace(" ", "-") }, action),
    el("span", { class: "who" }, e.server || ""),
    el("span", { class: "seg" }, segmentLabel(e.segment) || e.reason || ""));
}

function visibilityItem(e) {
  if (!e.to) return el("li", {}, el("time", {}, clock(e.at)), el("span", { class: "what" }, e.type),
                       el("span", { class: "seg" }, e.reason || ""));
  return el("li", { "data-segment": e.segment, "data-to": e.to, title: `${e.segment}\nwas ${e.from}` },
    el("time", {}, clock(e.at)), el("span", {}, el("span", { class: "state " + e.to }, e.to)),
    el("span", { class: "who" }, "was " + e.from), el("span", { class: "seg" }, segmentLabel(e.segment)));
}

function choose(ds) {
  page.ds = ds;
  history.replaceState(null, "", "#" + encodeURIComponent(ds));
  document.querySelectorAll("#datasources tbody tr").forEach(r =>
    r.classList.toggle("selected", r.dataset.datasource === ds));
  refreshTimeline().catch(showError);
}

async function refreshTimeline() {
  const tl = page.ds ? await getJson(`${API}/datasources/${encodeURIComponent(page.ds)}/timeline`) : null;
  drawTimeline(tl);
}

function showError(err) {
  const status = document.getElementById("status");
  status.dataset.state = "error";
  status.textContent = "no answer from the coordinator: " + err.message;
}

async function refresh() {
  try {
    const [overview, recent] = await Promise.all([getJson(`${API}/dashboard/overview`),
                                                  getJson(`${API}/dashboard/recent?since=${page.seq}`)]);
    if (recent.seq < page.seq) {  // the worker restarted: its feeds start again from the log
      page.feeds = { commands: [], visibility: [] };
      page.seq = 0;
    }
    drawTiers(overview.tiers);
    drawDataSources(overview.dataSources);
    drawFeeds(recent);
    page.seq = recent.seq;
    await refreshTimeline();
    const status = document.getElementById("status");
    status.dataset.state = "ok";
    status.textContent = "updated " + clock(Date.now()) + " UTC";
  } catch (err) {
    showError(err);
  }
}

async function loop() {
  if (!document.hidden) await refresh();
  setTimeout(loop, EVERY_MS);
}

document.getElementById("ds-select").addEventListener("change", e => choose(e.target.value));
drawLegend(null);
loop();
