// The Concord dashboard: polls /api/status and /metrics of the node that
// serves it once a second and redraws. Events are the differences between
// successive status documents, so they start when the page opens.
"use strict";

const POLL_MS = 1000, HISTORY = 120, MAX_EVENTS = 200;
const rateSeries = [], p50Series = [], p99Series = [];
let prevStatus = null, prevHist = null;

// With an auth token on the node, open the page as /#token=TOKEN.
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
const num = (v) => Number(v || 0);

function push(series, v) {
  series.push(v);
  if (series.length > HISTORY) series.shift();
}

function fmtBytes(b) {
  b = num(b);
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}

// fmtSize is a shard's approximate size as the CLI's SIZE column shows it
// (internal/cli shardSize: "-" when unknown, 0; else K, M or G of 1024,
// one decimal, rounded as Go's %.1f does: a tie to the even digit).
function fmtSize(b) {
  b = num(b);
  if (b === 0) return "-";
  const [d, u] = b >= 2 ** 30 ? [2 ** 30, "G"] : b >= 2 ** 20 ? [2 ** 20, "M"] : [2 ** 10, "K"];
  const t = (b / d) * 10;
  let n = Math.floor(t);
  if (t - n > 0.5 || (t - n === 0.5 && n % 2 === 1)) n++;
  return (n / 10).toFixed(1) + u;
}

function roleOf(shard, nodeId) {
  const r = (shard.shard.replicas || []).find((r) => r.nodeId === nodeId);
  if (!r) return null;
  if (shard.leaderNodeId === nodeId) return "leader";
  return r.role === "REPLICA_LEARNER" ? "learner" : "voter";
}

function renderSummary(st) {
  const under = st.shards.filter((s) => s.underReplicated).length;
  $("#summary").innerHTML =
    `cluster <b>${esc(BigInt(st.clusterId || 0).toString(16))}</b> · ${st.nodes.length} nodes · ` +
    `${st.shards.length} shards (${under} under-replicated) · answered by node ${esc(st.answeredByNodeId)} · ` +
    `updated ${new Date().toLocaleTimeString()}` +
    (st.staleReason ? ` · <b class="stale">stale: this node's own view (${esc(st.staleReason)})</b>` : "");
}

function renderNodes(st) {
  $("#nodes tbody").innerHTML = st.nodes.map((n) => {
    const hb = n.lastHeartbeatAgeSeconds < 0 ? "—" : n.lastHeartbeatAgeSeconds.toFixed(1) + " s ago";
    return `<tr data-node="${esc(n.node.nodeId)}" data-state="${esc(n.node.state)}">` +
      `<td>${esc(n.node.nodeId)}</td><td>${esc(n.node.address)}</td>` +
      `<td class="state-${esc(n.node.state)}">${esc(n.node.state.replace("NODE_", "").toLowerCase())}</td>` +
      `<td>${num(n.replicas)}</td><td>${num(n.leaders)}</td><td>${hb}</td>` +
      `<td>${num(n.requestRate).toFixed(0)}</td><td>${fmtBytes(n.diskBytes)}</td></tr>`;
  }).join("");
}

function renderShards(st) {
  const nodes = st.nodes.map((n) => n.node.nodeId);
  $("#shards thead").innerHTML = "<tr><th>shard</th><th>leader</th><th>term</th><th>applied</th>" +
    `<th title="approximate size on disk, as concord shard list's SIZE (-: unknown)">size</th>` +
    nodes.map((id) => `<th>node ${esc(id)}</th>`).join("") + "</tr>";
  $("#shards tbody").innerHTML = st.shards.map((s) => {
    const id = s.shard.shardId;
    const cells = nodes.map((n) => {
      const role = roleOf(s, n);
      const label = { leader: "L", voter: "V", learner: "l" }[role] || "";
      return `<td>${role ? `<span class="cell ${role}" data-role="${role}">${label}</span>` : ""}</td>`;
    }).join("");
    const name = s.isMeta ? `${esc(id)} (placement)` : esc(id);
    return `<tr data-shard="${esc(id)}" data-leader="${esc(s.leaderNodeId)}" class="${s.underReplicated ? "under" : ""}">` +
      `<td>${name}</td><td>${s.leaderNodeId === "0" ? "none" : "node " + esc(s.leaderNodeId)}</td>` +
      `<td>${esc(s.term)}</td><td>${esc(s.appliedIndex)}</td>` +
      `<td class="size" data-bytes="${esc(s.approxBytes || "0")}">${esc(fmtSize(s.approxBytes))}</td>${cells}</tr>`;
  }).join("");
}

function addEvent(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  const list = $("#events");
  list.insertBefore(li, list.firstChild);
  while (list.children.length > MAX_EVENTS) list.removeChild(list.lastChild);
}

// diffEvents reports what changed between two status documents: node
// states, leaders, replica sets, under-replication.
function diffEvents(prev, cur) {
  const prevNodes = new Map(prev.nodes.map((n) => [n.node.nodeId, n]));
  for (const n of cur.nodes) {
    const p = prevNodes.get(n.node.nodeId);
    if (!p) addEvent(`node ${n.node.nodeId} (${n.node.address}) appeared, ${n.node.state}`);
    else if (p.node.state !== n.node.state) addEvent(`node ${n.node.nodeId}: ${p.node.state} → ${n.node.state}`);
  }
  const prevShards = new Map(prev.shards.map((s) => [s.shard.shardId, s]));
  for (const s of cur.shards) {
    const p = prevShards.get(s.shard.shardId);
    if (!p) continue;
    const id = s.shard.shardId;
    if (p.leaderNodeId !== s.leaderNodeId) addEvent(`shard ${id}: leader node ${p.leaderNodeId} → node ${s.leaderNodeId} (term ${s.term})`);
    const was = new Set((p.shard.replicas || []).map((r) => r.nodeId));
    const now = new Set((s.shard.replicas || []).map((r) => r.nodeId));
    for (const n of now) if (!was.has(n)) addEvent(`shard ${id}: replica added on node ${n}`);
    for (const n of was) if (!now.has(n)) addEvent(`shard ${id}: replica removed from node ${n}`);
    if (p.underReplicated !== s.underReplicated) addEvent(`shard ${id}: ${s.underReplicated ? "under-replicated" : "fully replicated again"}`);
  }
}

// histogram sums the KV request latency buckets in a Prometheus text
// exposition: {le: cumulative count}.
function histogram(text) {
  const h = new Map();
  const re = /^concord_request_duration_seconds_bucket\{([^}]*)\} (\S+)$/gm;
  let m;
  while ((m = re.exec(text))) {
    if (!/op="KV\./.test(m[1])) continue;
    const le = /le="([^"]+)"/.exec(m[1])[1];
    h.set(le, (h.get(le) || 0) + Number(m[2]));
  }
  return h;
}

// quantile of the requests between two cumulative histograms, in ms.
function quantile(prev, cur, q) {
  const les = [...cur.keys()].sort((a, b) => Number(a) - Number(b));
  const delta = les.map((le) => [le, cur.get(le) - ((prev && prev.get(le)) || 0)]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (total <= 0) return null;
  const want = q * total;
  for (const [le, c] of delta) if (c >= want) return le === "+Inf" ? null : Number(le) * 1000;
  return null;
}

function drawChart(canvas, series, colors) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  const all = series.flat().filter((v) => v != null);
  const top = Math.max(1, ...all) * 1.1;
  ctx.fillStyle = "#555";
  ctx.font = "11px sans-serif";
  ctx.fillText(top.toFixed(top < 10 ? 1 : 0), 2, 11);
  ctx.fillText("0", 2, h - 2);
  series.forEach((s, k) => {
    ctx.strokeStyle = colors[k];
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let started = false;
    s.forEach((v, i) => {
      if (v == null) { started = false; return; }
      const x = 30 + (i * (w - 35)) / (HISTORY - 1), y = h - 4 - (v / top) * (h - 16);
      if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      started = true;
    });
    ctx.stroke();
  });
}

async function poll() {
  try {
    // The default answer is linearizable; when it fails (the meta shard
    // has no quorum, or this node cannot reach its leader) show the node's
    // own view, marked stale, rather than nothing.
    let resp = await fetch("api/status", { cache: "no-store", headers });
    let stale = "";
    if (resp.status === 503) {
      stale = await resp.text();
      resp = await fetch("api/status?stale=1", { cache: "no-store", headers });
    }
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()));
    const st = await resp.json();
    st.staleReason = stale;
    st.nodes = st.nodes || [];
    st.shards = st.shards || [];
    renderSummary(st);
    renderNodes(st);
    renderShards(st);
    if (prevStatus) diffEvents(prevStatus, st);
    prevStatus = st;
    push(rateSeries, st.nodes.reduce((a, n) => a + num(n.requestRate), 0));
    document.body.dataset.loaded = "true";
  } catch (e) {
    $("#summary").textContent = "status unavailable: " + e;
  }
  try {
    const hist = histogram(await (await fetch("metrics", { cache: "no-store" })).text());
    if (prevHist) {
      push(p50Series, quantile(prevHist, hist, 0.5));
      push(p99Series, quantile(prevHist, hist, 0.99));
    }
    prevHist = hist;
  } catch (e) { /* metrics are optional */ }
  drawChart($("#rate"), [rateSeries], ["#1d6fd6"]);
  drawChart($("#latency"), [p50Series, p99Series], ["#17803d", "#b3261e"]);
}

poll();
setInterval(poll, POLL_MS);
