// duet's web console: plain JavaScript over the admin API (/v1/...) with
// the session cookie the sign-in set; every change carries the session's
// CSRF token in X-CSRF-Token. No external resources (the page's CSP).
"use strict";

let csrf = null;
let me = "admin";
let timer = null;
const samples = [];
let lastMetrics = null;

const $ = (id) => document.getElementById(id);

async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const r = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401 && path !== "/console/session") { showSignin("Your session ended: sign in again."); throw new Error("signed out"); }
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch (_) { j = null; }
  if (!r.ok) throw new Error(j && j.message ? j.message : `HTTP ${r.status}`);
  return j;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function dl(target, pairs) {
  target.replaceChildren();
  for (const [k, v] of pairs) { target.append(el("dt", k), el("dd", v)); }
}

function showSignin(message) {
  csrf = null;
  if (timer) { clearInterval(timer); timer = null; }
  $("app-view").hidden = true;
  $("signout").hidden = true;
  $("signin-view").hidden = false;
  $("signin-error").textContent = message || "";
  $("signin-password").value = "";
  $("signin-password").focus();
}

function showApp() {
  $("signin-view").hidden = true;
  $("app-view").hidden = false;
  $("signout").hidden = false;
  refresh();
  if (!timer) timer = setInterval(refresh, 2000);
}

async function refresh() {
  try {
    const [status, stats, shares, users, cluster] = await Promise.all([
      api("GET", "/v1/status"), api("GET", "/v1/stats"), api("GET", "/v1/shares"), api("GET", "/v1/users"), api("GET", "/v1/cluster"),
    ]);
    renderStatus(status);
    renderStats(stats);
    renderShares(shares);
    await renderSnapshots(shares);
    renderUsers(users);
    renderCluster(cluster);
    await sampleMetrics();
    // An action's refusal stays up a while (a refresh every 2 s would
    // wipe it at once).
    if (Date.now() - failedAt > 10000) $("app-error").textContent = "";
  } catch (e) {
    if (e.message !== "signed out") $("app-error").textContent = e.message;
  }
}

function renderStatus(s) {
  $("node").textContent = `node ${s.node_id} · ${s.version}`;
  const problems = [];
  if (s.metadata_failed) problems.push("metadata store FAILED");
  const h = $("health");
  h.textContent = problems.length ? problems.join(", ") : "healthy";
  h.className = "badge " + (problems.length ? "bad" : "ok");
  dl($("status"), [
    ["Uptime", `${Math.floor(s.uptime_s / 3600)} h ${Math.floor((s.uptime_s % 3600) / 60)} min`],
    ["Shares", s.shares], ["Users", s.users], ["Files", s.files],
    ["Raft", `term ${s.raft.term}, applied ${s.raft.applied_index}`],
    ["Listeners", s.listeners.map((l) => `${l.protocol} ${l.addr}`).join(", ")],
  ]);
  if (s.capacity) {
    const c = s.capacity;
    const used = c.total_bytes - c.free_bytes;
    $("capacity-used").style.width = c.total_bytes ? `${(100 * used / c.total_bytes).toFixed(1)}%` : "0";
    $("capacity").textContent = `${bytes(c.avail_bytes)} available of ${bytes(c.total_bytes)} (${bytes(used)} used, ${bytes(c.reserve_bytes)} reserved)`;
  }
}

function renderStats(st) {
  const c = st.connections;
  dl($("connections"), [
    ["Open", c.open], ["SMB accepted", c.accepted_smb], ["NFS accepted", c.accepted_nfs],
    ["Refused (limits)", c.refused_connections_limit + c.refused_per_client_limit],
    ["SMB logon failures", c.smb_logon_failures], ["Admin sign-in failures", c.admin_auth_failures],
    ["Destage backlog", st.destage_backlog],
  ]);
}

function button(label, onclick) {
  const b = el("button", label);
  b.type = "button";
  b.addEventListener("click", onclick);
  return b;
}

function renderShares(list) {
  const tb = $("shares").tBodies[0];
  tb.replaceChildren();
  for (const s of list) {
    const tr = el("tr");
    tr.dataset.share = s.name;
    tr.append(el("td", s.name), el("td", s.path), el("td", s.protocols.join(", ")), el("td", s.read_only ? "read-only" : "read-write"),
      el("td", (s.users || []).join(", ") || "all"), el("td", s.nfs.clients.join(", ")),
      el("td", s.origin || "-"), el("td", s.exclusive ? (s.exclusive.partial ? "≥ " : "") + bytes(s.exclusive.bytes) : "-"));
    const td = el("td");
    td.append(button("Remove", async () => {
      if (!confirm(`Remove share ${s.name}? Its files stay in the namespace.`)) return;
      try { await api("DELETE", `/v1/shares/${encodeURIComponent(s.name)}`); refresh(); } catch (e) { $("app-error").textContent = e.message; }
    }));
    td.append(button(s.read_only ? "Make writable" : "Make read-only", async () => {
      try { await api("PATCH", `/v1/shares/${encodeURIComponent(s.name)}`, { read_only: !s.read_only }); refresh(); } catch (e) { $("app-error").textContent = e.message; }
    }));
    tr.append(td);
    tb.append(tr);
  }
}

let failedAt = 0;

// Shows why an action was refused.
function fail(e) {
  failedAt = Date.now();
  $("app-error").textContent = e.message;
}

function utc(ns) {
  return new Date(Math.floor(ns / 1e6)).toISOString().replace(/\.\d+Z$/, "Z");
}

function interval(secs) {
  for (const [u, n] of [["d", 86400], ["h", 3600], ["m", 60]]) if (secs % n === 0) return `${secs / n}${u}`;
  return `${secs}s`;
}

// 30s, 15m, 1h, 1d, or a bare number of minutes (as duetctl takes it).
function parseInterval(v) {
  const m = /^(\d+)([smhd]?)$/.exec(v.trim());
  if (!m) throw new Error(`invalid interval "${v}": give e.g. 30s, 15m, 1h or 1d`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400, "": 60 }[m[2]];
}

function selectedShare() {
  return $("snap-share").value;
}

// The snapshots of the share chosen, with the space only each holds, and
// the share's schedule.
async function renderSnapshots(shares) {
  const sel = $("snap-share");
  const keep = sel.value;
  sel.replaceChildren();
  for (const s of shares) {
    const o = el("option", s.name);
    o.value = s.name;
    sel.append(o);
  }
  if (shares.some((s) => s.name === keep)) sel.value = keep;
  const name = sel.value;
  const share = shares.find((s) => s.name === name);
  const tb = $("snapshots").tBodies[0];
  if (!share) { tb.replaceChildren(); return; }
  const sch = share.snapshot_schedule;
  $("sched-now").textContent = sch ? `Schedule: every ${interval(sch.every_s)}, keep ${sch.keep}.` : "No schedule.";
  const list = await api("GET", `/v1/shares/${encodeURIComponent(name)}/snapshots`);
  tb.replaceChildren();
  for (const sn of list.slice().reverse()) {
    const tr = el("tr");
    tr.dataset.snapshot = sn.name;
    tr.append(el("td", sn.name), el("td", utc(sn.created_ns)), el("td", sn.gmt), el("td", (sn.exclusive.partial ? "≥ " : "") + bytes(sn.exclusive.bytes), "num"),
      el("td", sn.scheduled ? "schedule" : "manual"), el("td", sn.clone || "-"));
    const td = el("td");
    const del = button("Delete", async () => {
      if (!confirm(`Delete snapshot ${sn.name} of share ${name}? It frees ${bytes(sn.exclusive.bytes)}.`)) return;
      try { await api("DELETE", `/v1/shares/${encodeURIComponent(name)}/snapshots/${encodeURIComponent(sn.name)}`); refresh(); } catch (e) { fail(e); }
    });
    del.className = "snap-delete";
    const cl = button("Clone", async () => {
      const n = $("clone-name").value.trim();
      if (!n) { fail(new Error("Give the clone share's name first.")); return; }
      try {
        await api("POST", `/v1/shares/${encodeURIComponent(name)}/clone`, { share: { name: n, path: `/clones/${n}` }, snapshot: sn.name });
        $("clone-name").value = "";
        refresh();
      } catch (e) { fail(e); }
    });
    cl.className = "snap-clone";
    td.append(del, cl);
    tr.append(td);
    tb.append(tr);
  }
}

function renderUsers(list) {
  const tb = $("users").tBodies[0];
  tb.replaceChildren();
  for (const u of list) {
    const tr = el("tr");
    tr.dataset.user = u.name;
    tr.append(el("td", u.name), el("td", u.uid), el("td", u.gid), el("td", u.enabled ? "yes" : "no"));
    const td = el("td");
    if (u.name !== "admin") {
      td.append(button("Remove", async () => {
        if (!confirm(`Remove user ${u.name}?`)) return;
        try { await api("DELETE", `/v1/users/${encodeURIComponent(u.name)}`); refresh(); } catch (e) { fail(e); }
      }));
      td.append(button(u.enabled ? "Disable" : "Enable", async () => {
        try { await api("PATCH", `/v1/users/${encodeURIComponent(u.name)}`, { enabled: !u.enabled }); refresh(); } catch (e) { fail(e); }
      }));
    }
    tr.append(td);
    tb.append(tr);
  }
}

function renderCluster(c) {
  $("cluster-summary").textContent = c.leader === null ? `No leader (term ${c.term}): an election is on, or no majority is up.`
    : `Leader: node ${c.leader}, term ${c.term}, ${c.voters.length} voter${c.voters.length === 1 ? "" : "s"}.`;
  const tb = $("cluster").tBodies[0];
  tb.replaceChildren();
  for (const n of c.nodes) {
    const tr = el("tr");
    tr.append(el("td", n.id), el("td", n.addr), el("td", n.applied), el("td", n.healthy ? "yes" : "no"), el("td", n.id === c.leader ? "leader" : "follower"));
    tb.append(tr);
  }
}

// Sums of the metric families the charts need, from the OpenMetrics text.
function parseMetrics(text) {
  const sum = { read: 0, written: 0, latSum: 0, latCount: 0 };
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const name = line.split(/[{ ]/, 1)[0];
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (!Number.isFinite(v)) continue;
    if (name === "duet_read_bytes_total") sum.read += v;
    else if (name === "duet_written_bytes_total") sum.written += v;
    else if (name === "duet_request_duration_seconds_sum") sum.latSum += v;
    else if (name === "duet_request_duration_seconds_count") sum.latCount += v;
  }
  return sum;
}

async function sampleMetrics() {
  const r = await fetch("/metrics", { credentials: "same-origin" });
  if (!r.ok) return;
  const m = parseMetrics(await r.text());
  const now = performance.now() / 1000;
  if (lastMetrics) {
    const dt = Math.max(0.001, now - lastMetrics.t);
    const dn = m.latCount - lastMetrics.m.latCount;
    samples.push({
      read: (m.read - lastMetrics.m.read) / dt,
      written: (m.written - lastMetrics.m.written) / dt,
      latency: dn > 0 ? (m.latSum - lastMetrics.m.latSum) / dn : 0,
    });
    while (samples.length > 90) samples.shift();
    const s = samples[samples.length - 1];
    $("throughput-now").textContent = `now: ${bytes(s.read)}/s read, ${bytes(s.written)}/s written`;
    $("latency-now").textContent = `now: ${(s.latency * 1000).toFixed(2)} ms`;
    draw($("chart-throughput"), [["read", "#2563eb"], ["written", "#dc2626"]]);
    draw($("chart-latency"), [["latency", "#059669"]]);
  }
  lastMetrics = { t: now, m };
}

function draw(canvas, series) {
  const g = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  g.clearRect(0, 0, w, h);
  let max = 0;
  for (const [k] of series) for (const s of samples) max = Math.max(max, s[k]);
  if (max <= 0) max = 1;
  for (const [k, colour] of series) {
    g.strokeStyle = colour;
    g.lineWidth = 2;
    g.beginPath();
    samples.forEach((s, i) => {
      const x = (i / 89) * w, y = h - 4 - (s[k] / max) * (h - 8);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  }
}

function splitList(v) {
  return v.split(",").map((x) => x.trim()).filter((x) => x);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("signin-error").textContent = "";
    try {
      const j = await api("POST", "/console/session", { user: $("signin-user").value, password: $("signin-password").value });
      csrf = j.csrf;
      me = j.user;
      showApp();
    } catch (e) {
      showSignin(e.message);
    }
  });
  $("signout").addEventListener("click", async () => {
    try { await api("DELETE", "/console/session"); } catch (_) { /* gone already */ }
    showSignin("Signed out.");
  });
  $("share-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const share = { name: $("share-name").value.trim(), path: $("share-path").value.trim(), read_only: $("share-readonly").checked };
    const users = splitList($("share-users").value);
    if (users.length) share.users = users;
    const clients = splitList($("share-clients").value);
    if (clients.length) share.nfs = { clients };
    try {
      await api("POST", "/v1/shares", share);
      $("share-form").reset();
      refresh();
    } catch (e) { fail(e); }
  });
  $("snap-share").addEventListener("change", () => refresh());
  $("snap-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const n = $("snap-name").value.trim();
    try {
      await api("POST", `/v1/shares/${encodeURIComponent(selectedShare())}/snapshots`, n ? { name: n } : {});
      $("snap-name").value = "";
      refresh();
    } catch (e) { fail(e); }
  });
  $("sched-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const body = { every_s: parseInterval($("sched-every").value), keep: Number($("sched-keep").value) };
      await api("PUT", `/v1/shares/${encodeURIComponent(selectedShare())}/snapshot-schedule`, body);
      $("sched-form").reset();
      refresh();
    } catch (e) { fail(e); }
  });
  $("sched-off").addEventListener("click", async () => {
    try { await api("DELETE", `/v1/shares/${encodeURIComponent(selectedShare())}/snapshot-schedule`); refresh(); } catch (e) { fail(e); }
  });
  $("clone-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const n = $("clone-name").value.trim();
    try {
      await api("POST", `/v1/shares/${encodeURIComponent(selectedShare())}/clone`, { share: { name: n, path: `/clones/${n}` } });
      $("clone-form").reset();
      refresh();
    } catch (e) { fail(e); }
  });
  $("user-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await api("POST", "/v1/users", { name: $("user-name").value.trim(), password: $("user-password").value });
      $("user-form").reset();
      refresh();
    } catch (e) { $("app-error").textContent = e.message; }
  });
  $("adminpw-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const pw = $("adminpw-new").value;
    if (pw !== $("adminpw-repeat").value) { $("adminpw-note").textContent = "The new passwords differ."; return; }
    try {
      await api("PUT", "/v1/admin/password", { user: me, password: pw, current: $("adminpw-current").value });
      $("adminpw-form").reset();
      // Every session of this admin ended with the change, this one too.
      showSignin("Password changed: sign in with the new one.");
    } catch (e) { $("adminpw-note").textContent = e.message; }
  });
  try {
    const j = await api("GET", "/console/session");
    csrf = j.csrf;
    me = j.user;
    showApp();
  } catch (_) {
    showSignin("");
  }
});
