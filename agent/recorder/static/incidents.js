// The incidents page: the list from /api/incidents, one incident's timeline from
// /api/incidents/<id>/timeline (read back from its exported MCAP file), drawn on a canvas.
"use strict";
const $ = (id) => document.getElementById(id);
const COLORS = { cmd: "#6af", duty: "#fa6", speed: "#6e6" };
const OWNER = { artex: "#357", sim2bot: "#573", robot_msg: "#735", console: "#753", "": "#222" };

async function load() {
  const r = await fetch("/api/incidents", { cache: "no-store" });
  const data = await r.json();
  const rec = data.recorder || {};
  $("rec").textContent = rec.degraded ? `recorder degraded: ${rec.degraded}` : rec.recording ? "recording" : "not recording";
  const list = $("list");
  list.textContent = "";
  $("empty").hidden = data.incidents.length > 0;
  for (const inc of data.incidents) {
    const li = document.createElement("li");
    li.dataset.id = inc.id;
    const kind = document.createElement("span");
    kind.className = `kind ${inc.kind}`;
    kind.textContent = inc.kind;
    const when = document.createElement("span");
    when.className = "when";
    when.textContent = `${inc.time} · ${inc.source}`;
    const reason = document.createElement("span");
    reason.className = "reason";
    reason.textContent = inc.reason;
    li.append(kind, when, reason);
    li.onclick = () => show(inc.id);
    list.append(li);
  }
  const wanted = new URLSearchParams(location.search).get("id") || (data.incidents[0] && data.incidents[0].id);
  if (wanted) show(wanted);
}

async function show(id) {
  for (const li of $("list").children) li.classList.toggle("sel", li.dataset.id === id);
  const r = await fetch(`/api/incidents/${encodeURIComponent(id)}/timeline`, { cache: "no-store" });
  if (!r.ok) { $("reason").textContent = await r.text(); return; }
  const t = await r.json();
  $("detail").hidden = false;
  $("title").textContent = `${t.incident.kind} at ${t.incident.time} (source ${t.incident.source})`;
  $("reason").textContent = t.incident.reason;
  $("download").href = `/api/incidents/${encodeURIComponent(id)}.mcap`;
  draw(t);
  const owners = t.owners.map(([s, who]) => `${s.toFixed(2)} s: ${who || "nobody"}`).join(" → ");
  $("owners").textContent = `who drove: ${owners || "no change in the window"}`;
  if (t.frame) {
    $("frame").src = `data:image/jpeg;base64,${t.frame.jpeg_base64}`;
    $("framecap").textContent = `camera ${t.frame.camera} at ${t.frame.t.toFixed(2)} s`;
  } else {
    $("frame").removeAttribute("src");
    $("framecap").textContent = "no camera frame in the window";
  }
  const table = $("cmds");
  table.textContent = "";
  // repeats of one (source, command, verdict) in a row are one line "xN"; the lines nearest the incident
  const rows = [];
  for (const c of t.commands) {
    const last = rows[rows.length - 1];
    if (last && last.c[1] === c[1] && last.c[2] === c[2] && last.c[3] === c[3]) { last.n++; last.end = c[0]; }
    else rows.push({ c, n: 1, end: c[0] });
  }
  const near = rows.map((r) => [Math.min(Math.abs(r.c[0]), Math.abs(r.end)), r])
    .sort((a, b) => a[0] - b[0]).slice(0, 12).map((x) => x[1]).sort((a, b) => a.c[0] - b.c[0]);
  for (const { c: [s, src, cmd, verdict, reason], n, end } of near) {
    const tr = table.insertRow();
    const when = n > 1 ? `${s.toFixed(2)}..${end.toFixed(2)} s` : `${s.toFixed(2)} s`;
    for (const v of [when, src, n > 1 ? `${cmd} x${n}` : cmd, verdict, reason.slice(0, 90)]) tr.insertCell().textContent = v;
  }
}

function draw(t) {
  const c = $("chart"), g = c.getContext("2d");
  const W = c.width, H = c.height, pad = 30;
  g.clearRect(0, 0, W, H);
  const rows = t.drive;
  if (!rows.length) return;
  const t0 = rows[0][0], t1 = rows[rows.length - 1][0];
  const x = (s) => pad + (s - t0) / Math.max(1e-3, t1 - t0) * (W - 2 * pad);
  const y = (v) => H / 2 - v * (H / 2 - pad);
  // who drove: bands along the bottom
  let owner = "", since = t0;
  const owners = [...t.owners, [t1, null]];
  for (const [s, who] of owners) {
    g.fillStyle = OWNER[owner] || "#444";
    g.fillRect(x(since), H - 12, x(Math.min(s, t1)) - x(since), 10);
    if (owner) { g.fillStyle = "#ddd"; g.font = "10px sans-serif"; g.fillText(owner, x(since) + 2, H - 14); }
    if (who !== null) { owner = who; since = Math.max(s, t0); }
  }
  g.strokeStyle = "#333"; g.beginPath(); g.moveTo(pad, y(0)); g.lineTo(W - pad, y(0)); g.stroke();
  g.fillStyle = "#888"; g.font = "11px sans-serif";
  g.fillText("+1", 4, y(1) + 4); g.fillText("0", 4, y(0) + 4); g.fillText("-1", 4, y(-1) + 4);
  g.fillText(`${t0.toFixed(1)} s`, pad, H - 16); g.fillText(`+${t1.toFixed(1)} s`, W - pad - 30, H - 16);
  const series = [[1, COLORS.cmd], [3, COLORS.duty], [5, COLORS.speed]];
  for (const [i, color] of series) {
    g.strokeStyle = color; g.lineWidth = 1.5; g.beginPath();
    rows.forEach((r, k) => (k ? g.lineTo(x(r[0]), y(r[i])) : g.moveTo(x(r[0]), y(r[i]))));
    g.stroke();
  }
  g.strokeStyle = "#f55"; g.lineWidth = 2; g.beginPath(); g.moveTo(x(0), pad / 2); g.lineTo(x(0), H - 14); g.stroke();
  g.fillStyle = "#f88"; g.font = "12px sans-serif";
  g.fillText(`${t.incident.kind}: ${t.incident.reason}`.slice(0, 90), Math.min(x(0) + 4, W - 420), pad / 2 + 10);
  g.lineWidth = 1;
}

load();
