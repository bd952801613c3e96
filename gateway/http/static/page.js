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
  for (const id of ["#error", "#summary", "#plan", "#results", "#outcomes", "#links"]) $(id).hidden = true;
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

$("#run").addEventListener("click", () => run(false));
$("#explain").addEventListener("click", () => run(true));
$("#sql").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(false); }
});

loadStores();
