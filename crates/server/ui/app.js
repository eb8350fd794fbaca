// Tidemark's web UI. Plain JavaScript, no dependency: it calls the server's JSON APIs
// (the same ones any client calls, with the browser's credentials) and builds the page
// with DOM methods. Every string from the server or the URL reaches the page through
// textContent or an attribute, never as markup.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
  '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
const MAX_DRAWN_SERIES = 200;
const RANGES = { '1h': 3600, '6h': 6 * 3600, '24h': 86400, '7d': 7 * 86400 };

const $ = (id) => document.getElementById(id);

/** An HTML element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

/** An SVG element with attributes. */
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function showError(id, message) {
  const box = $(id);
  box.textContent = message || '';
  box.hidden = !message;
}

/** The message of an API error answer: Elasticsearch's or Prometheus' shape. */
function errorText(status, body, text) {
  if (body && typeof body.error === 'object' && body.error !== null) {
    const e = body.error;
    return `${status} ${e.type || 'error'}: ${e.reason || JSON.stringify(e)}`;
  }
  if (body && typeof body.error === 'string') {
    return `${status} ${body.errorType || 'error'}: ${body.error}`;
  }
  const t = (text || '').trim();
  return t ? `${status}: ${t.slice(0, 500)}` : `HTTP ${status}`;
}

/** Calls an API of this server; resolves to its JSON answer, rejects with its error message. */
async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json' } };
  if (body !== undefined) {
    init.body = body;
    init.headers['content-type'] = 'application/json';
  }
  // Resolved against the origin, never against an address with `user:password@`
  // (fetch refuses URLs holding credentials; the browser adds the ones it has).
  const url = new URL(path, window.location.origin);
  let resp;
  try {
    resp = await fetch(url, init);
  } catch (e) {
    throw new Error(`the server did not answer: ${e.message}`);
  }
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!resp.ok) throw new Error(errorText(resp.status, json, text));
  if (json === null) throw new Error(`${resp.status}: the answer is not JSON`);
  return json;
}

function fmtInt(n) {
  return typeof n === 'number' && Number.isFinite(n) ? n.toLocaleString('en-US') : '–';
}

function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

function pad2(n) { return String(n).padStart(2, '0'); }

/** Local date-time text of unix seconds `t`. */
function fmtTime(t, withDate, withSeconds) {
  const d = new Date(t * 1000);
  let s = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  if (withSeconds) s += `:${pad2(d.getSeconds())}`;
  if (withDate) s = `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${s}`;
  return s;
}

// ---------------------------------------------------------------------------------------
// 1. Indices (GET /_stats) and the cluster line (GET /).

let indexNames = [];
let indexStats = {};

async function loadCluster() {
  try {
    const info = await api('GET', '/');
    $('cluster').textContent = `cluster ${info.cluster_name} · answers as Elasticsearch ${info.version && info.version.number}`;
  } catch (_) {
    $('cluster').textContent = '';
  }
}

async function loadIndices() {
  showError('indices-error', '');
  let stats;
  try {
    stats = await api('GET', '/_stats');
  } catch (e) {
    showError('indices-error', `indices: ${e.message}`);
    return;
  }
  indexStats = stats.indices || {};
  indexNames = Object.keys(indexStats).sort();
  const body = $('indices-body');
  body.replaceChildren();
  for (const name of indexNames) body.append(indexRow(name, indexStats[name]));
  $('indices-empty').hidden = indexNames.length > 0;

  $('index-names').replaceChildren(...indexNames.map((n) => el('option', { value: n })));
  const disk = $('disk-index');
  const chosen = disk.value;
  disk.replaceChildren(...indexNames.map((n) => el('option', { value: n }, n)));
  if (indexNames.includes(chosen)) disk.value = chosen;
  if (!$('search-index').value && indexNames.length) $('search-index').value = indexNames[0];
}

function indexRow(name, s) {
  const tm = s.tidemark || {};
  const c = tm.counters || {};
  const docs = tm.documents ?? (s.primaries && s.primaries.docs && s.primaries.docs.count);
  const bytes = tm.bytes ?? (s.primaries && s.primaries.store && s.primaries.store.size_in_bytes);
  const status = el('td', {}, s.status || 'open');
  if (s.status_reason) status.title = s.status_reason;
  const search = el('button', { type: 'button', class: 'link' }, 'search');
  search.addEventListener('click', () => {
    $('search-index').value = name;
    $('search-section').scrollIntoView({ behavior: 'smooth' });
  });
  const storage = el('button', { type: 'button', class: 'link' }, 'storage');
  storage.addEventListener('click', () => {
    $('disk-index').value = name;
    runDiskUsage(name);
    $('disk-section').scrollIntoView({ behavior: 'smooth' });
  });
  return el('tr', {},
    el('td', { class: 'name' }, name),
    status,
    el('td', { class: 'num' }, fmtInt(docs)),
    el('td', { class: 'num' }, fmtInt(tm.series)),
    el('td', { class: 'num' }, fmtBytes(bytes)),
    el('td', { class: 'num' }, typeof tm.bytes_per_document === 'number' ? tm.bytes_per_document.toFixed(2) : '–'),
    el('td', { class: 'num' }, fmtInt(tm.partitions)),
    el('td', { class: 'num' }, fmtInt(tm.segments)),
    el('td', { class: 'num' }, fmtInt(c.created)),
    el('td', { class: 'num' }, fmtInt(c.duplicates)),
    el('td', { class: 'num' }, fmtInt(c.replaced)),
    el('td', { class: 'actions' }, search, storage));
}

// ---------------------------------------------------------------------------------------
// 2. PromQL: /api/v1/query_range drawn as an SVG line chart.

/** Unix seconds from a URL parameter: a number of seconds or an RFC 3339 date. */
function parseTime(v) {
  if (v === null || v === '') return null;
  if (/^-?\d+(\.\d+)?$/.test(v)) return Number(v);
  const ms = Date.parse(v);
  return Number.isNaN(ms) ? null : ms / 1000;
}

/** The value of a datetime-local input for unix seconds `t` (local time). */
function toLocalInput(t) {
  return fmtTime(t, true, true).replace(' ', 'T');
}

function fromLocalInput(v) {
  const ms = new Date(v).getTime();
  return Number.isNaN(ms) ? null : ms / 1000;
}

/** The data's time range: min and max timestamp over every index with documents. */
async function dataRange() {
  const mappings = await api('GET', '/_mapping');
  let lo = Infinity;
  let hi = -Infinity;
  for (const name of Object.keys(mappings)) {
    const props = (mappings[name].mappings && mappings[name].mappings.properties) || {};
    const field = Object.keys(props).find((f) => props[f] && props[f].type === 'date');
    if (!field) continue;
    const body = JSON.stringify({ size: 0, aggs: { lo: { min: { field } }, hi: { max: { field } } } });
    try {
      const r = await api('POST', `/${encodeURIComponent(name)}/_search`, body);
      const a = r.aggregations || {};
      if (a.lo && typeof a.lo.value === 'number') lo = Math.min(lo, a.lo.value / 1000);
      if (a.hi && typeof a.hi.value === 'number') hi = Math.max(hi, a.hi.value / 1000);
    } catch (_) {
      // An index that cannot answer (events without a date, reopening) adds nothing.
    }
  }
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) throw new Error('no index holds data yet');
  if (hi - lo < 60) { lo -= 300; hi += 300; }
  return [Math.floor(lo), Math.ceil(hi)];
}

async function timeRange() {
  const range = $('promql-range').value;
  if (range === 'custom') {
    const start = fromLocalInput($('promql-start').value);
    const end = fromLocalInput($('promql-end').value);
    if (start === null || end === null) throw new Error('custom range: set both times');
    if (end <= start) throw new Error('custom range: the end must be after the start');
    return [start, end];
  }
  if (range === 'data') return dataRange();
  const end = Math.floor(Date.now() / 1000);
  return [end - (RANGES[range] || 3600), end];
}

function autoStep(start, end) {
  return Math.max(1, Math.ceil((end - start) / 300));
}

/** Seconds of a Prometheus duration or a number of seconds (`15`, `15s`, `5m`, `1h30m`). */
function parseStep(v) {
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v);
  const units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
  const re = /(\d+)(ms|s|m|h|d|w|y)/g;
  let total = 0;
  let used = 0;
  let m;
  while ((m = re.exec(v)) !== null) { total += Number(m[1]) * units[m[2]]; used += m[0].length; }
  return used === v.length && total > 0 ? total : null;
}

let runId = 0;

async function runPromql() {
  const id = ++runId;
  const query = $('promql-query').value.trim();
  showError('promql-error', '');
  if (!query) { showError('promql-error', 'type a PromQL expression'); return; }
  $('promql-status').textContent = 'running…';
  try {
    const [start, last] = await timeRange();
    const stepText = $('promql-step').value.trim();
    const step = stepText ? parseStep(stepText) : autoStep(start, last);
    if (step === null) throw new Error(`step: not a duration: ${stepText}`);
    // Over the data's range, the last step falls on or after the newest sample.
    const end = $('promql-range').value === 'data' ? start + Math.ceil((last - start) / step) * step : last;
    rememberQuery(query, start, end);
    const params = new URLSearchParams({ query, start: String(start), end: String(end), step: String(step) });
    const r = await api('GET', `/api/v1/query_range?${params}`);
    if (id !== runId) return;
    const result = (r.data && r.data.result) || [];
    drawChart(result, start, end, step);
    const points = result.reduce((n, s) => n + ((s.values && s.values.length) || 0), 0);
    let note = `${result.length} series, ${points} points, step ${step}s`;
    if (result.length > MAX_DRAWN_SERIES) note += ` (the first ${MAX_DRAWN_SERIES} drawn)`;
    $('promql-status').textContent = note;
  } catch (e) {
    if (id !== runId) return;
    $('promql-status').textContent = '';
    showError('promql-error', e.message);
    drawChart([], 0, 0, 1);
  }
}

/** Puts the query and its range into the address, so that the link reproduces it. */
function rememberQuery(query, start, end) {
  const p = new URLSearchParams(window.location.search);
  p.set('query', query);
  const range = $('promql-range').value;
  p.set('range', range);
  if (range === 'custom') { p.set('start', String(start)); p.set('end', String(end)); } else { p.delete('start'); p.delete('end'); }
  const step = $('promql-step').value.trim();
  if (step) p.set('step', step); else p.delete('step');
  window.history.replaceState(null, '', `${window.location.pathname}?${p}`);
}

/** Ticks of about `count` round values covering [lo, hi]. */
function niceTicks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const first = Math.floor(lo / step) * step;
  const last = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = first; v <= last + step / 2; v += step) ticks.push(Math.abs(v) < step / 1e6 ? 0 : v);
  return { ticks, step, lo: first, hi: last };
}

function fmtValue(v, step) {
  const a = Math.max(Math.abs(v), Math.abs(step));
  const si = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']].find(([f]) => a >= f);
  const [f, suffix] = si || [1, ''];
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / f) + 1e-9)));
  return `${(v / f).toFixed(decimals)}${suffix}`;
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
  21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 365 * 86400];

function timeTicks(start, end, maxTicks) {
  const step = TIME_STEPS.find((s) => (end - start) / s <= maxTicks) || TIME_STEPS[TIME_STEPS.length - 1];
  // Ticks fall on round local times (midnight for days), not on round UTC seconds.
  const offset = -new Date(start * 1000).getTimezoneOffset() * 60;
  const ticks = [];
  for (let t = Math.ceil((start + offset) / step) * step - offset; t <= end; t += step) ticks.push(t);
  return { ticks, step };
}

function seriesLabel(metric) {
  const m = metric || {};
  const name = m.__name__ || '';
  const labels = Object.keys(m).filter((k) => k !== '__name__').sort()
    .map((k) => `${k}="${m[k]}"`);
  return `${name}{${labels.join(', ')}}`;
}

/** Draws `result` (a matrix) over [start, end]: axes with ticks, one path per series, a legend. */
function drawChart(result, start, end, step) {
  const svg = $('chart');
  const legend = $('legend');
  svg.replaceChildren();
  legend.replaceChildren();
  $('chart-tip').hidden = true;
  chartState = null;
  const W = 960;
  const H = 340;
  const m = { left: 64, right: 16, top: 12, bottom: 34 };
  const series = result.slice(0, MAX_DRAWN_SERIES).map((s, i) => {
    const points = (s.values || []).map(([t, v]) => [Number(t), Number(v)])
      .filter(([t, v]) => Number.isFinite(t) && Number.isFinite(v));
    return { label: seriesLabel(s.metric), color: COLORS[i % COLORS.length], points };
  });
  const values = series.flatMap((s) => s.points.map((p) => p[1]));
  if (!values.length || end <= start) {
    const msg = svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' });
    msg.textContent = result.length ? 'no finite value in the range' : 'no data';
    svg.append(msg);
    return;
  }
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi) { const d = Math.abs(lo) * 0.1 || 1; lo -= d; hi += d; }
  const y = niceTicks(lo, hi, 5);
  const px = (t) => m.left + ((t - start) / (end - start)) * (W - m.left - m.right);
  const py = (v) => H - m.bottom - ((v - y.lo) / (y.hi - y.lo)) * (H - m.top - m.bottom);

  const grid = svgEl('g', {});
  const yAxis = svgEl('g', { class: 'axis' });
  for (const v of y.ticks) {
    const yy = py(v);
    grid.append(svgEl('line', { class: 'grid', x1: m.left, x2: W - m.right, y1: yy, y2: yy }));
    yAxis.append(svgEl('line', { x1: m.left - 5, x2: m.left, y1: yy, y2: yy }));
    const label = svgEl('text', { x: m.left - 8, y: yy + 4, 'text-anchor': 'end' });
    label.textContent = fmtValue(v, y.step);
    yAxis.append(label);
  }
  yAxis.append(svgEl('line', { x1: m.left, x2: m.left, y1: m.top, y2: H - m.bottom }));
  const x = timeTicks(start, end, 9);
  const multiDay = end - start > 86400;
  const xAxis = svgEl('g', { class: 'axis' });
  for (const t of x.ticks) {
    const xx = px(t);
    grid.append(svgEl('line', { class: 'grid', x1: xx, x2: xx, y1: m.top, y2: H - m.bottom }));
    xAxis.append(svgEl('line', { x1: xx, x2: xx, y1: H - m.bottom, y2: H - m.bottom + 5 }));
    const label = svgEl('text', { x: xx, y: H - m.bottom + 18, 'text-anchor': 'middle' });
    label.textContent = x.step >= 86400 ? fmtTime(t, true).slice(0, 10) : fmtTime(t, multiDay, x.step < 60);
    xAxis.append(label);
  }
  xAxis.append(svgEl('line', { x1: m.left, x2: W - m.right, y1: H - m.bottom, y2: H - m.bottom }));
  svg.append(grid, yAxis, xAxis);

  const lines = svgEl('g', { class: 'lines' });
  series.forEach((s, i) => {
    let d = '';
    let prev = null;
    let run = 0;
    for (const [t, v] of s.points) {
      const gap = prev === null || t - prev > step * 1.5;
      if (gap && run === 1) d += ' h0.5';
      d += `${gap ? (d ? ' M' : 'M') : ' L'}${px(t).toFixed(1)},${py(v).toFixed(1)}`;
      run = gap ? 1 : run + 1;
      prev = t;
    }
    if (run === 1) d += ' h0.5';
    const path = svgEl('path', { class: 'series', d, stroke: s.color, 'stroke-linecap': 'round', 'data-series': i });
    const title = svgEl('title', {});
    title.textContent = s.label;
    path.append(title);
    lines.append(path);

    const swatch = svgEl('svg', { class: 'swatch', width: 14, height: 4 });
    swatch.append(svgEl('rect', { width: 14, height: 4, fill: s.color }));
    const item = el('li', { title: 'click to hide or show' }, swatch, s.label);
    item.addEventListener('click', () => {
      item.classList.toggle('off');
      path.classList.toggle('hidden');
    });
    legend.append(item);
  });
  svg.append(lines);
  const cursor = svgEl('line', { class: 'cursor', y1: m.top, y2: H - m.bottom, visibility: 'hidden' });
  svg.append(cursor);
  chartState = { series, start, end, step, px, m, W, cursor, byTime: series.map((s) => new Map(s.points)) };
}

let chartState = null;

function onChartMove(ev) {
  const c = chartState;
  const tip = $('chart-tip');
  if (!c) return;
  const svg = $('chart');
  const ctm = svg.getScreenCTM();
  if (!ctm) return;
  const pt = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(ctm.inverse());
  if (pt.x < c.m.left || pt.x > c.W - c.m.right) { tip.hidden = true; c.cursor.setAttribute('visibility', 'hidden'); return; }
  const raw = c.start + ((pt.x - c.m.left) / (c.W - c.m.left - c.m.right)) * (c.end - c.start);
  // Samples of query_range sit at start + k·step.
  const t = c.start + Math.round((raw - c.start) / c.step) * c.step;
  const rows = [];
  const paths = svg.querySelectorAll('path.series');
  c.series.forEach((s, i) => {
    if (paths[i] && paths[i].classList.contains('hidden')) return;
    const v = c.byTime[i].get(t);
    if (v !== undefined) rows.push([s, v]);
  });
  rows.sort((a, b) => b[1] - a[1]);
  c.cursor.setAttribute('x1', c.px(t));
  c.cursor.setAttribute('x2', c.px(t));
  c.cursor.setAttribute('visibility', 'visible');
  tip.replaceChildren(el('div', {}, fmtTime(t, true, true)));
  for (const [s, v] of rows.slice(0, 12)) {
    const swatch = svgEl('svg', { class: 'swatch', width: 10, height: 10 });
    swatch.append(svgEl('rect', { width: 10, height: 10, fill: s.color }));
    tip.append(el('div', {}, swatch, `${v} ${s.label}`));
  }
  if (rows.length > 12) tip.append(el('div', { class: 'muted' }, `… ${rows.length - 12} more`));
  const box = $('chart-box').getBoundingClientRect();
  const left = ev.clientX - box.left + 14;
  tip.hidden = false;
  const maxLeft = box.width - tip.offsetWidth - 4;
  tip.style.left = `${Math.max(0, left > maxLeft ? ev.clientX - box.left - tip.offsetWidth - 14 : left)}px`;
  tip.style.top = `${Math.max(0, ev.clientY - box.top + 10)}px`;
}

function onChartLeave() {
  $('chart-tip').hidden = true;
  if (chartState) chartState.cursor.setAttribute('visibility', 'hidden');
}

// ---------------------------------------------------------------------------------------
// 3. Elasticsearch _search.

async function runSearch() {
  showError('search-error', '');
  const out = $('search-result');
  const index = $('search-index').value.trim();
  if (!index) { showError('search-error', 'name an index'); return; }
  const text = $('search-body').value.trim() || '{}';
  try {
    JSON.parse(text);
  } catch (e) {
    showError('search-error', `the body is not JSON: ${e.message}`);
    return;
  }
  $('search-status').textContent = 'searching…';
  try {
    const r = await api('POST', `/${encodeURIComponent(index)}/_search`, text);
    const total = r.hits && r.hits.total ? r.hits.total.value : undefined;
    $('search-status').textContent = `${fmtInt(total)} hits, took ${r.took} ms`;
    out.textContent = JSON.stringify(r, null, 2);
    out.hidden = false;
  } catch (e) {
    $('search-status').textContent = '';
    out.hidden = true;
    showError('search-error', e.message);
  }
}

// ---------------------------------------------------------------------------------------
// 4. Storage breakdown: POST /<index>/_disk_usage.

function shareBar(fraction) {
  const bar = svgEl('svg', { class: 'bar', width: 100, height: 8 });
  bar.append(svgEl('rect', { class: 'track', width: 100, height: 8 }));
  bar.append(svgEl('rect', { class: 'fill', width: Math.max(0, Math.min(1, fraction)) * 100, height: 8 }));
  return bar;
}

function breakdownTable(title, parts, total) {
  const rows = Object.entries(parts || {})
    .map(([name, p]) => [name, typeof p === 'object' && p !== null ? p : { bytes: p }])
    .sort((a, b) => (b[1].bytes || 0) - (a[1].bytes || 0));
  const body = el('tbody', {});
  for (const [name, p] of rows) {
    const share = total > 0 ? (p.bytes || 0) / total : 0;
    body.append(el('tr', {},
      el('td', { class: 'name' }, name),
      el('td', { class: 'num' }, fmtBytes(p.bytes)),
      el('td', { class: 'num' }, typeof p.bytes_per_doc === 'number' ? p.bytes_per_doc.toFixed(2) : '–'),
      el('td', {}, shareBar(share)),
      el('td', { class: 'num' }, `${(share * 100).toFixed(1)} %`)));
  }
  const head = el('thead', {}, el('tr', {}, el('th', {}, 'part'), el('th', { class: 'num' }, 'bytes'),
    el('th', { class: 'num' }, 'bytes/doc'), el('th', {}, 'share'), el('th', {})));
  return el('div', {}, el('h3', {}, title), el('table', { class: 'breakdown' }, head, body));
}

async function runDiskUsage(name) {
  const index = name || $('disk-index').value;
  showError('disk-error', '');
  const out = $('disk-result');
  if (!index) { showError('disk-error', 'no index to analyze'); return; }
  $('disk-status').textContent = 'analyzing…';
  try {
    const r = await api('POST', `/${encodeURIComponent(index)}/_disk_usage?run_expensive_tasks=true`);
    const u = r[index] || Object.entries(r).find(([k]) => k !== '_shards')?.[1] || {};
    const detail = (u.tidemark && u.tidemark.detail) || {};
    const total = detail.total_bytes ?? u.store_size_in_bytes;
    const segments = detail.segment_bytes ?? (u.all_fields && u.all_fields.total_in_bytes);
    $('disk-status').textContent = '';
    const summary = el('p', {}, `${index}: ${fmtBytes(total)} on disk, ${fmtBytes(segments)} in segments, `
      + `${fmtInt(detail.documents)} documents, ${typeof detail.bytes_per_doc === 'number' ? detail.bytes_per_doc.toFixed(2) : '–'} bytes per document`);
    const fields = detail.fields || Object.fromEntries(Object.entries((u.fields) || {})
      .map(([k, v]) => [k, { bytes: v.total_in_bytes }]));
    if (!segments) {
      summary.append(el('br', {}), el('span', { class: 'muted' },
        'Nothing is in segments yet: the write-ahead log holds every document until a refresh '
        + '(POST /<index>/_refresh) writes them into a segment.'));
    }
    out.replaceChildren(summary, el('div', { class: 'disk-grid' },
      breakdownTable('segment columns', fields, segments),
      breakdownTable('segment sections', detail.components, segments),
      breakdownTable('files', detail.files, total)));
  } catch (e) {
    $('disk-status').textContent = '';
    out.replaceChildren();
    showError('disk-error', e.message);
  }
}

// ---------------------------------------------------------------------------------------
// Start: read the address (`?query=…&range=…|start=…&end=…&step=…&search=…&disk=…`).

function applyParams() {
  const p = new URLSearchParams(window.location.search);
  const query = p.get('query');
  if (query !== null) $('promql-query').value = query;
  const start = parseTime(p.get('start'));
  const end = parseTime(p.get('end'));
  const range = p.get('range');
  if (start !== null && end !== null) {
    $('promql-range').value = 'custom';
    $('promql-start').value = toLocalInput(start);
    $('promql-end').value = toLocalInput(end);
  } else if (range && [...$('promql-range').options].some((o) => o.value === range)) {
    $('promql-range').value = range;
  }
  $('promql-custom').hidden = $('promql-range').value !== 'custom';
  if (p.get('step')) $('promql-step').value = p.get('step');
  if (p.get('search')) $('search-index').value = p.get('search');
  return { query, disk: p.get('disk'), search: p.get('search') };
}

async function start() {
  $('search-body').value = JSON.stringify({ size: 10, sort: [{ '@timestamp': 'desc' }] }, null, 2);
  const wanted = applyParams();
  $('promql-range').addEventListener('change', () => {
    const custom = $('promql-range').value === 'custom';
    $('promql-custom').hidden = !custom;
    if (custom && !$('promql-start').value) {
      const now = Math.floor(Date.now() / 1000);
      $('promql-start').value = toLocalInput(now - 3600);
      $('promql-end').value = toLocalInput(now);
    }
  });
  $('promql-form').addEventListener('submit', (e) => { e.preventDefault(); runPromql(); });
  $('promql-query').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); runPromql(); }
  });
  $('search-form').addEventListener('submit', (e) => { e.preventDefault(); runSearch(); });
  $('disk-form').addEventListener('submit', (e) => { e.preventDefault(); runDiskUsage(); });
  $('indices-refresh').addEventListener('click', () => { loadIndices(); });
  $('chart').addEventListener('mousemove', onChartMove);
  $('chart').addEventListener('mouseleave', onChartLeave);
  drawChart([], 0, 0, 1);
  loadCluster();
  await loadIndices();
  const jobs = [];
  if (wanted.query) jobs.push(runPromql());
  if (wanted.search) jobs.push(runSearch());
  if (wanted.disk) {
    $('disk-index').value = wanted.disk;
    jobs.push(runDiskUsage(wanted.disk));
  }
  await Promise.all(jobs);
  document.body.setAttribute('data-ready', 'true');
}

document.addEventListener('DOMContentLoaded', start);
