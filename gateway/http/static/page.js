// The query page: everything is served by iqgate itself (no CDN; the machine may have no internet).
"use strict";
const $ = (s) => document.querySelector(s);
let token = sessionStorage.getItem("iqgate-token");

class AuthNeeded extends Error {}

async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  if (token) headers["Authorization"] = "Bearer " + token;
  const resp = await fetch(path, Object.assign({}, opts, { headers }));
  if (resp.status === 401) {
    let msg = "This server requires a token.";
    try { if (token) msg = (await resp.json()).error.message; } catch (e) { /* not JSON */ }
    askToken(msg);
    throw new AuthNeeded(msg);
  }
  return resp;
}

function askToken(msg) {
  $("#auth").hidden = false;
  $("#auth-msg").textContent = msg;
  $("#token").focus();
}

$("#auth-form").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("#token").value.trim() || null;
  if (token) sessionStorage.setItem("iqgate-token", token); else sessionStorage.removeItem("iqgate-token");
  $("#auth").hidden = true;
  loadStores();
});

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function json(v) { return JSON.stringify(v); }

async function loadStores() {
  let body;
  try { body = await (await api("/v1/stores")).json(); } catch (e) { if (e instanceof AuthNeeded) return; throw e; }
  const tbody = $("#stores tbody");
  tbody.replaceChildren();
  for (const s of body.stores) {
    const tr = el("tr");
    tr.dataset.store = s.name;
    const name = el("td");
    const b = el("button", s.name);
    b.title = "query it";
    b.addEventListener("click", () => { $("#sql").value = `SELECT * FROM ${s.name} LIMIT 100`; run(false); });
    name.append(b);
    tr.append(name, el("td", s.kind), el("td", s.key),
      el("td", s.columns.map((c) => `${c.name} ${c.type}`).join(", ")), el("td", s.partitions, "num"),
      el("td", Object.entries(s.positions).map(([p, pos]) => `${p}: ${pos === null ? "-" : json(pos)}`).join("\n")),
      el("td", s.status ? s.status.status || json(s.status) : ""));
    tbody.append(tr);
  }
  try {
    const h = await (await api("/v1/health")).json();
    $("#state").textContent = `${h.state} · ${h.status}`;
  } catch (e) { /* health is informative only */ }
}

function resultUrl(sql, format) {
  const q = new URLSearchParams({ sql, format });
  if ($("#partial").checked) q.set("partial", "true");
  return "/v1/query?" + q.toString();
}

function setLinks(sql) {
  for (const f of ["json", "csv", "arrow"]) $("#link-" + f).href = resultUrl(sql, f);
  $("#links").hidden = false;
}

// With a token the links cannot carry it: fetch with the header and hand the browser the bytes.
for (const f of ["json", "csv", "arrow"]) {
  $("#link-" + f).addEventListener("click", async (e) => {
    if (!token) return;
    e.preventDefault();
    const a = e.currentTarget;
    const resp = await api(a.getAttribute("href"));
    const blob = await resp.blob();
    const tmp = el("a");
    tmp.href = URL.createObjectURL(blob);
    tmp.download = "iqgate-result." + f;
    document.body.append(tmp);
    tmp.click();
    tmp.remove();
  });
}

function clearOutput() {
  stopLive();
  for (const id of ["#error", "#summary", "#plan", "#results", "#outcomes", "#links", "#live"]) $(id).hidden = true;
}

function showError(err, sql, offset) {
  const box = $("#error");
  let text = `${err.code}: ${err.message}`;
  if (err.line) {
    const line = err.line, col = line === 1 ? err.col - offset : err.col;
    text += `\nat line ${line}, column ${col}`;
    const src = sql.split("\n")[line - 1 + 0];
    if (src !== undefined) {
      const shown = line === 1 ? src.slice(offset) : src;
      text += `\n\n${shown}\n${" ".repeat(Math.max(0, col - 1))}^`;
    }
    // put the cursor where the problem is
    const lines = $("#sql").value.split("\n");
    let at = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
    $("#sql").setSelectionRange(at + col - 1, at + col - 1);
  }
  if (err.retryable) text += "\n(retryable)";
  box.textContent = text;
  box.hidden = false;
  if (err.partitions && err.partitions.length) showPartitions(err.partitions);
}

function showPartitions(parts) {
  const tbody = $("#partitions tbody");
  tbody.replaceChildren();
  for (const p of parts) {
    const tr = el("tr");
    tr.append(el("td", p.store), el("td", p.partition, "num"),
      el("td", p.failure_reason || "ok", p.failure_reason ? "failed" : "ok"), el("td", p.failure_message || ""),
      el("td", p.position ? json(p.position) : ""));
    tbody.append(tr);
  }
  $("#outcomes").hidden = false;
}

function cell(v, type) {
  if (v === null) return el("td", "NULL", "null");
  const numeric = /INT|DOUBLE|FLOAT|DECIMAL|REAL/.test(type);
  return el("td", typeof v === "object" ? json(v) : String(v), numeric ? "num" : undefined);
}

async function run(explain) {
  const typed = $("#sql").value;
  if (!typed.trim()) return;
  const prefix = explain && !/^\s*explain\b/i.test(typed) ? "EXPLAIN " : "";
  const sql = prefix + typed;
  clearOutput();
  const body = { sql };
  if ($("#partial").checked) body.partial = true;
  let resp;
  try {
    resp = await api("/v1/sql", { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", "Accept": "application/json" } });
  } catch (e) { if (e instanceof AuthNeeded) return; throw e; }
  const data = await resp.json();
  if (!resp.ok && data.error && data.error.code === "STREAM_REQUIRED") { subscribe(body, sql); return; }
  if (!resp.ok) { showError(data.error, sql, prefix.length); return; }
  if (data.statement === "explain") {
    $("#plan").textContent = data.rows.map((r) => r[0]).join("\n");
    $("#plan").hidden = false;
    return;
  }
  const failed = (data.partitions || []).filter((p) => p.failure_reason).length;
  $("#summary").replaceChildren(el("span", `${data.row_count} row${data.row_count === 1 ? "" : "s"} · Position `),
    el("code", json(data.position || {})),
    el("span", failed ? ` · ${failed} partition(s) failed` : "", failed ? "failed" : undefined));
  $("#summary").querySelector("code").id = "position";
  $("#summary").hidden = false;
  const thead = $("#results thead"), tbody = $("#results tbody");
  const hr = el("tr");
  for (const c of data.columns) { const th = el("th", c.name); th.title = c.type; hr.append(th); }
  thead.replaceChildren(hr);
  tbody.replaceChildren();
  for (const row of data.rows) {
    const tr = el("tr");
    row.forEach((v, i) => tr.append(cell(v, data.columns[i].type)));
    tbody.append(tr);
  }
  $("#results").hidden = false;
  if (data.partitions && data.partitions.length) showPartitions(data.partitions);
  if (data.statement === "select") setLinks(sql);
}

// -- live answers (SUBSCRIBE / EMIT CHANGES): a table whose rows change in place, a chart over time ----------
let live = null;

function stopLive() {
  if (live) { live.abort.abort(); live = null; }
}

function liveKey(row, identityAt) { return JSON.stringify(identityAt.map((i) => row[i])); }

function liveColumns(columns, identity) {
  const thead = $("#results thead"), hr = el("tr");
  for (const c of columns) { const th = el("th", c.name); th.title = c.type; hr.append(th); }
  thead.replaceChildren(hr);
  $("#results tbody").replaceChildren();
  const select = $("#live-column");
  const numeric = columns.filter((c) => /INT|DOUBLE|FLOAT|DECIMAL|REAL/.test(c.type) && !identity.includes(c.name));
  select.replaceChildren(...numeric.map((c) => { const o = el("option", "sum(" + c.name + ")"); o.value = c.name; return o; }));
  $("#live-column").parentElement.hidden = numeric.length === 0;
  $("#results").hidden = false;
}

function liveRow(tr, row, columns) {
  tr.replaceChildren(...row.map((v, i) => cell(v, columns[i].type)));
  tr.classList.add("changed");
  setTimeout(() => tr.classList.remove("changed"), 600);
}

function liveApply(state, msg) {
  const tbody = $("#results tbody");
  if (msg.op === "insert" || msg.op === "upsert") {
    const key = liveKey(msg.row, state.identityAt);
    let tr = state.rows.get(key);
    if (!tr) { tr = el("tr"); tr.dataset.key = key; tbody.append(tr); state.rows.set(key, tr); }
    tr.values = msg.row;
    liveRow(tr, msg.row, state.columns);
    state.changes += 1;
  } else if (msg.op === "delete") {
    const key = liveKey(msg.row, state.identityAt);
    const tr = state.rows.get(key);
    if (tr) { tr.remove(); state.rows.delete(key); }
    state.changes += 1;
  } else if (msg.op === "reset") {
    state.rows.clear();
    state.columns = msg.columns;
    state.identityAt = state.identity.map((n) => msg.columns.findIndex((c) => c.name === n));
    liveColumns(msg.columns, state.identity);
  } else if (msg.op === "progress") {
    $("#live-position").textContent = json(msg.position);
    liveSample(state);
  }
  $("#live-count").textContent = state.rows.size;
  $("#live-changes").textContent = state.changes;
}

function liveSample(state) {
  const name = $("#live-column").value;
  const at = state.columns.findIndex((c) => c.name === name);
  if (at < 0) return;
  let sum = 0;
  for (const tr of state.rows.values()) { const v = tr.values[at]; if (typeof v === "number") sum += v; }
  state.points.push([Date.now(), sum]);
  if (state.points.length > 300) state.points.shift();
  drawChart(state, name);
}

function drawChart(state, name) {
  const canvas = $("#live-chart"), ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 28;
  ctx.clearRect(0, 0, w, h);
  const pts = state.points;
  canvas.dataset.points = String(pts.length);
  canvas.dataset.last = pts.length ? String(pts[pts.length - 1][1]) : "";
  if (!pts.length) return;
  const t0 = pts[0][0], t1 = Math.max(pts[pts.length - 1][0], t0 + 1);
  let lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  if (hi === lo) { hi += 1; lo -= 1; }
  ctx.strokeStyle = "#ccd"; ctx.strokeRect(pad, 4, w - pad - 4, h - pad);
  ctx.fillStyle = "#555"; ctx.font = "11px sans-serif";
  ctx.fillText(String(+hi.toPrecision(6)), 2, 12); ctx.fillText(String(+lo.toPrecision(6)), 2, h - pad);
  ctx.fillText(`sum(${name}) over the last ${Math.round((t1 - t0) / 1000)} s`, pad + 4, h - 8);
  ctx.strokeStyle = "#24a"; ctx.lineWidth = 1.5; ctx.beginPath();
  pts.forEach(([t, v], i) => {
    const x = pad + (w - pad - 4) * (t - t0) / (t1 - t0), y = 4 + (h - pad) * (1 - (v - lo) / (hi - lo));
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

async function subscribe(body, sql) {
  const abort = new AbortController();
  live = { abort };
  let resp;
  try {
    resp = await api("/v1/sql", { method: "POST", body: JSON.stringify(body), signal: abort.signal,
      headers: { "Content-Type": "application/json", "Accept": "application/x-ndjson" } });
  } catch (e) { if (e instanceof AuthNeeded || abort.signal.aborted) return; throw e; }
  if (!resp.ok) { showError((await resp.json()).error, sql, 0); return; }
  $("#live").hidden = false;
  $("#live-state").textContent = "live";
  $("#live-state").classList.remove("ended");
  const state = { rows: new Map(), changes: 0, points: [], columns: [], identity: [], identityAt: [] };
  live.state = state;
  const reader = resp.body.getReader(), decoder = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const msg = JSON.parse(line);
        if (msg.error) { showError(msg.error, sql, 0); throw new Error("ended"); }
        if (msg.columns && !msg.op) {
          state.columns = msg.columns;
          state.identity = msg.identity;
          state.identityAt = msg.identity.map((n) => msg.columns.findIndex((c) => c.name === n));
          liveColumns(msg.columns, msg.identity);
          continue;
        }
        liveApply(state, msg);
      }
    }
  } catch (e) { /* aborted, or ended with an error shown above */ }
  $("#live-state").textContent = "ended";
  $("#live-state").classList.add("ended");
}

$("#live-stop").addEventListener("click", () => { stopLive(); $("#live-state").textContent = "stopped";
  $("#live-state").classList.add("ended"); });
$("#live-column").addEventListener("change", () => { if (live && live.state) live.state.points = []; });

$("#run").addEventListener("click", () => run(false));
$("#explain").addEventListener("click", () => run(true));
$("#sql").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(false); }
});

loadStores();
