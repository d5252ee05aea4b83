// queen-go console: one page, hash routes (#/, #/pipeline, #/queues,
// #/queues/<name>, #/dlq, #/groups), polling the broker's API every 2 s.
// docs/console.md says which route feeds which figure.
//
// Every value from the broker reaches the page through textContent (h()
// below), never as HTML: queue names and payloads are user data.

import { api, ApiError, token, signOut, seg, query } from './api.js';
import { History } from './series.js';
import { timeChart } from './charts.js';

const POLL_MS = 2000;
const HISTORY_SAMPLES = 300; // 10 minutes at POLL_MS

const state = {
  history: new History(HISTORY_SAMPLES),
  pipeline: null, // last GET /api/v1/system/pipeline
  pipelineDenied: null, // the 403 text when the token may not read it
  health: null, // last GET /health
  view: null,
  ticks: 0,
};
// Tests and curious operators can read the state from the browser console.
window.queenConsole = state;

// ---------- DOM and formatting helpers ----------

/** h creates an element; attrs: class, data-*, on* (functions), hidden, other attributes; kids: nodes or text. */
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'hidden') el.hidden = true;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

function fill(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
  return el;
}

const nf = new Intl.NumberFormat('en-US');
function num(n) {
  return n === null || n === undefined ? '—' : nf.format(n);
}
function dec(n, digits) {
  return n === null || n === undefined ? '—' : n.toFixed(digits);
}
function rate(n) {
  if (n === null || n === undefined) return '—';
  return n >= 100 ? nf.format(Math.round(n)) : n.toFixed(n >= 10 ? 1 : 2);
}
function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[i];
}
function ms(v) {
  if (v === null || v === undefined) return '—';
  return v >= 100 ? Math.round(v) + ' ms' : v.toFixed(v >= 10 ? 1 : 2) + ' ms';
}
function secs(v) {
  if (v === null || v === undefined) return '—';
  if (v < 60) return v.toFixed(v >= 10 ? 0 : 1) + ' s';
  if (v < 3600) return Math.floor(v / 60) + ' min ' + Math.round(v % 60) + ' s';
  return (v / 3600).toFixed(1) + ' h';
}
function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString('sv-SE'); // 2026-12-01 07:40:08, local time
}
function excerpt(v, n = 120) {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s === undefined ? '' : s.length > n ? s.slice(0, n) + '…' : s;
}
function pretty(v) {
  return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
}

/** card is a figure: label, value (text), raw (data-value, for tests), sub line. */
function card(test, label) {
  const value = h('div', { class: 'value', 'data-test': test });
  const sub = h('div', { class: 'sub' });
  const el = h('div', { class: 'card' }, h('div', { class: 'label' }, label), value, sub);
  return {
    el,
    set(text, raw, subText, cls) {
      value.textContent = text;
      value.dataset.value = raw === undefined || raw === null ? '' : String(raw);
      sub.textContent = subText || '';
      el.className = 'card' + (cls ? ' ' + cls : '');
    },
  };
}

function panel(title, ...kids) {
  return h('section', { class: 'panel' }, h('h2', {}, title), ...kids);
}

function table(headers, tbody) {
  return h('div', { class: 'table-wrap' },
    h('table', {}, h('thead', {}, h('tr', {}, headers.map((x) => {
      const [text, cls] = Array.isArray(x) ? x : [x, ''];
      return h('th', { class: cls || undefined }, text);
    }))), tbody));
}

function td(text, attrs) {
  return h('td', attrs || {}, text);
}
function tdn(n, attrs) {
  return h('td', { class: 'num', 'data-value': n === null || n === undefined ? '' : n, ...(attrs || {}) }, num(n));
}
function emptyRow(cols, text) {
  return h('tr', {}, h('td', { colspan: cols, class: 'muted' }, text));
}

function denied(e) {
  return h('p', { class: 'denied', 'data-test': 'denied' },
    'Not available with this token: ' + e.message + ' (HTTP ' + e.status + ').');
}

/** QUEUE_MODE is queue mode's consumer group name (competing consumers, one cursor). */
const QUEUE_MODE = '__QUEUE_MODE__';

/** groupLabel is how a consumer group name is shown: queue mode's as "queue mode". */
const groupLabel = (g) => (g === QUEUE_MODE ? 'queue mode' : g);

/** failureText says which route answered e (a failed api call) what, with its HTTP status. */
function failureText(e) {
  return (e.path ? e.path + ' answered ' : '') + (e.message || String(e)) + (e.status ? ' (HTTP ' + e.status + ')' : '');
}

let toastTimer = null;
function showError(e) {
  const el = document.getElementById('error');
  el.textContent = (e.path ? e.path + ': ' : '') + (e.message || String(e));
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 8000);
}

/** confirmStep returns a button that, clicked, shows a confirm box; act runs on "Confirm". */
function confirmStep({ test, label, cls, question, act }) {
  const text = h('p');
  const yes = h('button', { type: 'button', class: cls || 'danger', 'data-test': test + '-confirm' }, 'Confirm');
  const no = h('button', { type: 'button', 'data-test': test + '-cancel' }, 'Cancel');
  const box = h('div', { class: 'confirm', hidden: true, 'data-test': test + '-box' }, text, h('div', { class: 'actions' }, yes, no));
  const btn = h('button', { type: 'button', 'data-test': test }, label);
  btn.addEventListener('click', () => {
    const q = question();
    if (q === null) return;
    text.textContent = q;
    box.hidden = false;
    yes.focus();
  });
  no.addEventListener('click', () => { box.hidden = true; });
  yes.addEventListener('click', async () => {
    yes.disabled = true;
    try {
      await act();
      box.hidden = true;
    } catch (e) {
      showError(e);
    } finally {
      yes.disabled = false;
    }
  });
  return { btn, box };
}

// ---------- polling shared by every view ----------

async function pollPipeline() {
  try {
    const p = await api('/api/v1/system/pipeline');
    state.pipeline = p;
    state.pipelineDenied = null;
    state.history.add(p);
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) state.pipelineDenied = e;
    else throw e;
  }
}

async function pollHealth() {
  try {
    state.health = await api('/health', { accept: [503] });
  } catch (e) {
    state.health = { status: 'unknown', error: e.message };
  }
}

function updateHeader() {
  const pill = document.getElementById('pill-health');
  const hl = state.health;
  if (!hl) {
    pill.textContent = '…';
    pill.className = 'pill';
  } else if (hl.status === 'healthy') {
    pill.textContent = 'healthy';
    pill.className = 'pill good';
  } else {
    pill.textContent = hl.status === 'unknown' ? 'no answer' : 'unhealthy: ' + (hl.projector || 'database ' + (hl.database || '?'));
    pill.className = 'pill bad';
  }
  const m = state.pipeline && state.pipeline.maintenance;
  const banner = document.getElementById('pill-maint');
  const modes = m ? [m.push && 'push', m.pop && 'pop'].filter(Boolean) : [];
  banner.hidden = modes.length === 0;
  banner.textContent = modes.join(' + ') + ' maintenance';
  document.getElementById('signout').hidden = !token();
}

/**
 * setStale shows (e: the error of the view's last poll) or hides (null) the
 * note that the view's figures are not current: a view whose route failed
 * keeps what it showed before, and says since when.
 */
let lastGood = null; // when the view's poll last succeeded
function setStale(e) {
  const el = document.getElementById('stale');
  if (!e) {
    lastGood = new Date();
    el.hidden = true;
    return;
  }
  el.textContent = 'Not current: ' + failureText(e) + '. '
    + (lastGood ? 'Shown as of ' + lastGood.toLocaleTimeString() + '.' : 'Nothing shown yet.');
  el.hidden = false;
}

let busy = false;
let rerun = false; // a tick was asked for while one ran: run again at once
let timer = null;
// tick polls the routes every view shares (health, pipeline), then the
// view's own (v.tick), then draws (v.draw). Each part stands alone: a route
// that fails (the resource routes answer 503 while PostgreSQL is away)
// does not keep the others' figures from being drawn; the pipeline and
// /health answer without PostgreSQL (docs/console.md).
async function tick() {
  clearTimeout(timer);
  if (busy) {
    rerun = true;
    return;
  }
  busy = true;
  rerun = false;
  const started = Date.now();
  const v = state.view;
  try {
    let err = null;
    await Promise.all([pollHealth(), pollPipeline().catch((e) => { err = e; })]);
    if (v && v.tick) {
      try {
        await v.tick();
        if (v === state.view) setStale(null);
      } catch (e) {
        if (v === state.view) setStale(e);
        err = err || e;
      }
    }
    if (v && v.draw && v === state.view) v.draw();
    state.ticks++;
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    if (err) showError(err);
  } catch (e) {
    showError(e);
  } finally {
    busy = false;
    updateHeader();
    timer = setTimeout(tick, rerun ? 0 : Math.max(200, POLL_MS - (Date.now() - started)));
  }
}

// ---------- views ----------

function throughputChart(el) {
  return timeChart(el, {
    title: 'Push and pop rate', unit: 'messages/s', fmt: rate,
    series: [
      { key: 'pushRate', label: 'pushed (queued + buffered)' },
      { key: 'popRate', label: 'popped' },
      { key: 'ackRate', label: 'acked' },
    ],
  });
}

function overviewView() {
  const c = {
    queues: card('ov-queues', 'Queues'),
    partitions: card('ov-partitions', 'Partitions'),
    groups: card('ov-groups', 'Consumer groups'),
    total: card('ov-total', 'Messages'),
    pending: card('ov-pending', 'Pending'),
    processing: card('ov-processing', 'Processing'),
    completed: card('ov-completed', 'Completed'),
    dead: card('ov-dead', 'Dead letters'),
  };
  const r = {
    push: card('ov-push-rate', 'Push rate'),
    pop: card('ov-pop-rate', 'Pop rate'),
    backlog: card('ov-backlog', 'Projector backlog'),
    pg: card('ov-pg', 'PostgreSQL'),
  };
  const chartEl = h('div', { class: 'chart', 'data-test': 'chart-throughput' });
  const pipeNote = h('div');
  const qbody = h('tbody');
  // GET /api/v1/resources/queues is paged (100 by name by default): the
  // overview shows that first page and says how many there are in all.
  const qmore = h('p', { class: 'note', 'data-test': 'ov-queues-more', hidden: true });
  const unavail = h('p', { class: 'denied', hidden: true, 'data-test': 'ov-unavailable' });
  const el = h('div', {},
    h('h1', {}, 'Overview'),
    unavail,
    h('div', { class: 'cards' }, Object.values(c).map((x) => x.el)),
    h('div', { class: 'grid2' },
      panel('Throughput', chartEl, pipeNote,
        h('p', { class: 'note' }, 'Rates are differences of the broker\'s counters between polls (every 2 s), kept for 10 minutes in this tab.')),
      panel('Now', h('div', { class: 'cards' }, Object.values(r).map((x) => x.el)),
        h('p', { class: 'note' }, h('a', { href: '#/pipeline' }, 'Durability pipeline →')))),
    panel('Queues', table(['Queue', 'Namespace', 'Task', ['Partitions', 'num'], ['Pending', 'num'], ['Processing', 'num'], ['Total', 'num']], qbody), qmore));
  let chart = null;
  return {
    el,
    mounted() { chart = throughputChart(chartEl); },
    destroy() { if (chart) chart.destroy(); },
    draw() {
      if (chart) chart.update(state.history);
      const s = state.history.lastWith('pushRate');
      fill(pipeNote);
      if (state.pipelineDenied) {
        fill(pipeNote, denied(state.pipelineDenied));
        for (const x of Object.values(r)) x.set('—', null, 'needs an admin token');
        return;
      }
      r.push.set(s ? rate(s.pushRate) : '—', s && s.pushRate, 'messages/s');
      r.pop.set(s ? rate(s.popRate) : '—', s && s.popRate, 'messages/s');
      const p = state.pipeline;
      if (p) {
        r.backlog.set(num(p.projector.backlog), p.projector.backlog, 'WAL records, lag ' + secs(p.projector.lagSeconds),
          p.projector.backlog > 0 ? 'alert' : '');
        r.pg.set(p.postgres.healthy ? 'healthy' : 'unreachable', p.postgres.healthy,
          p.postgres.healthy ? 'round-trip ' + ms(p.postgres.pingMillis) : p.postgres.error, p.postgres.healthy ? '' : 'danger');
      }
    },
    // tick reads the counts and the queue table, which need PostgreSQL.
    // A route that fails (503 while PostgreSQL is away) blanks its part
    // and says why, instead of leaving numbers that are no longer true;
    // the throughput and "Now" figures come from the pipeline route and
    // stay live (draw).
    async tick() {
      const [ovr, qsr] = await Promise.allSettled([api('/api/v1/resources/overview'), api('/api/v1/resources/queues' + query({ limit: QUEUES_PAGE }))]);
      const failed = [ovr, qsr].filter((r) => r.status === 'rejected').map((r) => r.reason);
      fill(unavail, failed.length === 0 ? null : [
        'Not available now: ', failed.map(failureText).join('; '),
        '. These figures need PostgreSQL; the throughput and the "Now" figures come from the broker and stay live.']);
      unavail.hidden = failed.length === 0;
      if (ovr.status === 'fulfilled') {
        const ov = ovr.value;
        const m = ov.messages || {};
        c.queues.set(num(ov.queues), ov.queues, ov.namespaces ? num(ov.namespaces) + (ov.namespaces === 1 ? ' namespace' : ' namespaces') : '');
        c.partitions.set(num(ov.partitions), ov.partitions);
        c.groups.set(num(ov.consumerGroups), ov.consumerGroups, 'named, queue mode not counted');
        c.total.set(num(m.total), m.total, 'stored');
        c.pending.set(num(m.pending), m.pending, 'queue mode');
        c.processing.set(num(m.processing), m.processing, 'leased');
        c.completed.set(num(m.completed), m.completed, 'queue mode');
        c.dead.set(num(m.deadLetter), m.deadLetter, 'every group', m.deadLetter > 0 ? 'alert' : '');
      } else {
        for (const x of Object.values(c)) x.set('—', null, 'unavailable', 'unavailable');
      }
      if (qsr.status === 'fulfilled') {
        const list = qsr.value.queues || [];
        const all = qsr.value.total || list.length;
        qmore.hidden = all <= list.length;
        fill(qmore, all > list.length ? ['The first ', num(list.length), ' of ', num(all), ' queues by name; ', h('a', { href: '#/queues' }, 'Queues'), ' pages through them all.'] : null);
        fill(qbody, list.length === 0 ? emptyRow(7, 'No queues yet.') : list.map((q) => h('tr', { 'data-test': 'ov-queue-row', 'data-queue': q.name },
          td(h('a', { href: '#/queues/' + seg(q.name) }, q.name)), td(q.namespace || '—'), td(q.task || '—'),
          tdn(q.partitions), tdn(q.messages && q.messages.pending), tdn(q.messages && q.messages.processing), tdn(q.messages && q.messages.total))));
      } else {
        fill(qbody, emptyRow(7, 'Unavailable: ' + qsr.reason.message));
      }
    },
  };
}

function maintenanceBox(kind) {
  const path = kind === 'push' ? '/api/v1/system/maintenance' : '/api/v1/system/maintenance/pop';
  const explain = kind === 'push'
    ? 'On: every push is fsynced to the WAL and answered buffered; the projector pauses. Off: the projector drains the WAL into PostgreSQL.'
    : 'On: every pop answers 204 (nothing delivered); pushes go on. Off: consumers are served again.';
  const pill = h('span', { class: 'pill', 'data-test': 'maint-' + kind + '-state' });
  let on = false;
  const step = confirmStep({
    test: 'maint-' + kind + '-toggle',
    label: 'Turn on…',
    question: () => (on
      ? 'Turn ' + kind + ' maintenance OFF? ' + (kind === 'push' ? 'The projector resumes and drains the WAL.' : 'Pops deliver messages again.')
      : 'Turn ' + kind + ' maintenance ON? ' + (kind === 'push' ? 'Pushes are answered buffered until it is turned off.' : 'Every pop answers 204 until it is turned off.')),
    act: async () => {
      await api(path, { method: 'POST', body: { enabled: !on } });
      await tick();
    },
  });
  const el = h('div', { 'data-test': 'maint-' + kind },
    h('h3', {}, (kind === 'push' ? 'Push' : 'Pop') + ' maintenance ', pill),
    h('p', {}, explain), step.btn, step.box);
  return {
    el,
    set(v) {
      on = v;
      pill.textContent = v ? 'on' : 'off';
      pill.className = 'pill ' + (v ? 'warn' : 'good');
      step.btn.textContent = v ? 'Turn off…' : 'Turn on…';
    },
  };
}

function pipelineView() {
  const c = {
    walBytes: card('pl-wal-bytes', 'WAL size'),
    walRecords: card('pl-wal-records', 'WAL records'),
    checkpoint: card('pl-checkpoint', 'Checkpoint'),
    backlog: card('pl-backlog', 'Projector backlog'),
    lag: card('pl-lag', 'Projector lag'),
    fsync: card('pl-fsync', 'WAL fsync p99'),
    batch: card('pl-batch', 'Projection p99'),
    pg: card('pl-pg', 'PostgreSQL'),
    projector: card('pl-projector', 'Projector'),
  };
  const charts = {
    backlog: h('div', { class: 'chart', 'data-test': 'chart-backlog' }),
    lag: h('div', { class: 'chart', 'data-test': 'chart-lag' }),
    latency: h('div', { class: 'chart', 'data-test': 'chart-latency' }),
    throughput: h('div', { class: 'chart', 'data-test': 'chart-throughput' }),
  };
  const push = maintenanceBox('push');
  const pop = maintenanceBox('pop');
  const body = h('div', {},
    h('div', { class: 'cards' }, Object.values(c).map((x) => x.el)),
    panel('Maintenance', h('div', { class: 'maint' }, push.el, pop.el)),
    h('div', { class: 'grid2' },
      panel('Projector backlog', charts.backlog),
      panel('Projector lag', charts.lag),
      panel('Latency', charts.latency,
        h('p', { class: 'note' }, 'Per 2 s interval: mean and p99 (estimated from the histogram buckets) of WAL group-commit fsyncs and projection transactions.')),
      panel('Throughput', charts.throughput)));
  const deniedBox = h('div');
  const el = h('div', {}, h('h1', {}, 'Durability pipeline'),
    h('p', { class: 'muted' }, 'A push is fsynced into the WAL (group commit) before it is answered; the projector moves WAL records into PostgreSQL, one transaction per batch, with the checkpoint in the same transaction.'),
    deniedBox, body);
  const made = [];
  return {
    el,
    mounted() {
      made.push(
        ['backlog', timeChart(charts.backlog, { title: 'Backlog', unit: 'WAL records', fmt: num, integer: true, series: [{ key: 'backlog', label: 'records not yet in PostgreSQL' }] })],
        ['lag', timeChart(charts.lag, { title: 'Lag', unit: 'seconds', fmt: (v) => dec(v, 1), series: [{ key: 'lag', label: 'age of the oldest unprojected record' }] })],
        ['latency', timeChart(charts.latency, {
          title: 'Latency', unit: 'ms', fmt: (v) => dec(v, 2),
          series: [{ key: 'fsyncP99Ms', label: 'fsync p99' }, { key: 'fsyncMeanMs', label: 'fsync mean' },
            { key: 'batchP99Ms', label: 'projection p99' }, { key: 'batchMeanMs', label: 'projection mean' }],
        })],
        ['throughput', throughputChart(charts.throughput)]);
    },
    destroy() { for (const [, ch] of made) ch.destroy(); },
    draw() {
      if (state.pipelineDenied) {
        fill(deniedBox, denied(state.pipelineDenied));
        body.hidden = true;
        return;
      }
      fill(deniedBox);
      body.hidden = false;
      for (const [, ch] of made) ch.update(state.history);
      const p = state.pipeline;
      if (!p) return;
      const w = p.wal;
      c.walBytes.set(bytes(w.bytes), w.bytes, w.maxBytes > 0 ? 'of ' + bytes(w.maxBytes) + ' cap' : 'no cap (QUEEN_WAL_MAX_BYTES=0)',
        w.maxBytes > 0 && w.bytes > 0.75 * w.maxBytes ? 'alert' : '');
      c.walRecords.set(num(w.records), w.records, w.records ? '#' + num(w.firstIndex) + ' … #' + num(w.durableIndex) + ' fsynced' : 'empty',
        w.healthy ? '' : 'danger');
      const pr = p.projector;
      c.checkpoint.set(num(pr.checkpoint), pr.checkpoint, 'last WAL index in PostgreSQL');
      c.backlog.set(num(pr.backlog), pr.backlog, 'WAL records not yet in PostgreSQL', pr.backlog > 0 ? 'alert' : '');
      c.lag.set(secs(pr.lagSeconds), pr.lagSeconds, pr.oldestUnprojectedAt ? 'oldest accepted ' + when(pr.oldestUnprojectedAt) : 'nothing waiting',
        pr.lagSeconds > 5 ? 'alert' : '');
      const f = state.history.lastWith('fsyncP99Ms');
      c.fsync.set(f ? ms(f.fsyncP99Ms) : '—', f && f.fsyncP99Ms,
        (f ? 'mean ' + ms(f.fsyncMeanMs) + ', ' : '') + num(p.metrics.walFsyncSeconds.count) + ' fsyncs');
      const b = state.history.lastWith('batchP99Ms');
      c.batch.set(b ? ms(b.batchP99Ms) : '—', b && b.batchP99Ms,
        (b ? 'mean ' + ms(b.batchMeanMs) + ', ' : '') + num(p.metrics.projectorBatchSeconds.count) + ' batches, '
        + num(p.metrics.projectorBatchErrors) + ' failed');
      c.pg.set(p.postgres.healthy ? 'healthy' : 'unreachable', p.postgres.healthy,
        p.postgres.healthy ? 'round-trip ' + ms(p.postgres.pingMillis) : p.postgres.error, p.postgres.healthy ? '' : 'danger');
      const pstate = pr.stopped ? 'stopped' : pr.paused ? 'paused' : pr.dbHealthy ? 'running' : 'retrying';
      c.projector.set(pstate, pstate, pr.stopped || pr.lastError || (pr.paused ? 'push maintenance mode' : 'projecting'),
        pr.stopped ? 'danger' : pr.paused || !pr.dbHealthy ? 'alert' : '');
      push.set(p.maintenance.push);
      pop.set(p.maintenance.pop);
    },
  };
}

function queuesView() {
  const body = h('tbody');
  const pageInfo = h('span', { class: 'muted', 'data-test': 'queues-page' });
  let offset = 0;
  let total = 0;
  const prev = h('button', { type: 'button', 'data-test': 'queues-prev', onclick: () => { offset = Math.max(0, offset - QUEUES_PAGE); tick(); } }, '← Previous');
  const next = h('button', { type: 'button', 'data-test': 'queues-next', onclick: () => { offset += QUEUES_PAGE; tick(); } }, 'Next →');
  const el = h('div', {}, h('h1', {}, 'Queues'),
    panel('All queues', table(['Queue', 'Namespace', 'Task', ['Partitions', 'num'], ['Pending', 'num'], ['Processing', 'num'], ['Total', 'num'], 'Created'], body),
      h('div', { class: 'pager' }, prev, next, pageInfo)));
  return {
    el,
    async tick() {
      let qs = await api('/api/v1/resources/queues' + query({ limit: QUEUES_PAGE, offset }));
      if ((qs.queues || []).length === 0 && offset > 0) {
        // The list shrank under this page: go back to its start.
        offset = 0;
        qs = await api('/api/v1/resources/queues' + query({ limit: QUEUES_PAGE }));
      }
      const list = qs.queues || [];
      total = qs.total || 0;
      pageInfo.textContent = list.length ? (offset + 1) + '–' + (offset + list.length) + ' of ' + num(total) : '';
      prev.disabled = offset === 0;
      next.disabled = offset + list.length >= total;
      fill(body, list.length === 0 ? emptyRow(8, 'No queues yet.') : list.map((q) => h('tr', { 'data-test': 'queue-row', 'data-queue': q.name },
        td(h('a', { href: '#/queues/' + seg(q.name) }, q.name)), td(q.namespace || '—'), td(q.task || '—'), tdn(q.partitions),
        tdn(q.messages && q.messages.pending), tdn(q.messages && q.messages.processing), tdn(q.messages && q.messages.total), td(when(q.createdAt)))));
    },
  };
}

/** seekPanel is the form that moves a consumer group's cursors on one queue. */
function seekPanel(onDone) {
  const title = h('h2', {});
  const toEnd = h('input', { type: 'radio', name: 'seek-mode', value: 'end', checked: true, 'data-test': 'seek-toend' });
  const toTime = h('input', { type: 'radio', name: 'seek-mode', value: 'time', 'data-test': 'seek-totime' });
  const ts = h('input', { type: 'datetime-local', step: 1, 'data-test': 'seek-timestamp' });
  const result = h('p', { class: 'note', 'data-test': 'seek-result' });
  let target = null;
  const step = confirmStep({
    test: 'seek-submit', label: 'Seek…',
    question: () => {
      if (toTime.checked && !ts.value) {
        result.textContent = 'Pick a time first.';
        return null;
      }
      return toEnd.checked
        ? 'Move consumer group "' + target.group + '" on queue "' + target.queue + '" to the end? Every message not yet consumed is skipped for this group.'
        : 'Move consumer group "' + target.group + '" on queue "' + target.queue + '" to ' + new Date(ts.value).toLocaleString('sv-SE')
          + '? Messages before it are skipped, messages after it are delivered (again) to this group.';
    },
    act: async () => {
      const body = toEnd.checked ? { toEnd: true } : { timestamp: new Date(ts.value).toISOString() };
      const r = await api('/api/v1/consumer-groups/' + seg(target.group) + '/queues/' + seg(target.queue) + '/seek', { method: 'POST', body });
      result.textContent = 'Done: ' + num(r && r.partitionsUpdated) + ' partitions moved.';
      if (onDone) await onDone();
    },
  });
  const close = h('button', { type: 'button', 'data-test': 'seek-close' }, 'Close');
  const el = h('section', { class: 'panel', hidden: true, 'data-test': 'seek-panel' }, title,
    h('div', { class: 'filters' },
      h('label', { class: 'radio' }, toEnd, 'to the end (skip the backlog)'),
      h('label', { class: 'radio' }, toTime, 'to a time:', ts)),
    h('div', { class: 'actions' }, step.btn, close), step.box, result);
  close.addEventListener('click', () => { el.hidden = true; });
  ts.addEventListener('focus', () => { toTime.checked = true; });
  return {
    el,
    open(group, queue) {
      target = { group, queue };
      fill(title, 'Seek consumer group ', h('code', {}, group), ' on queue ', h('code', {}, queue));
      result.textContent = '';
      step.box.hidden = true;
      el.hidden = false;
      el.scrollIntoView({ block: 'nearest' });
    },
  };
}

function groupRow(g, seek, withQueue) {
  return h('tr', { 'data-test': 'group-row', 'data-group': g.name, 'data-queue': g.queueName },
    td(g.name === QUEUE_MODE ? ['queue mode ', h('code', {}, g.name)] : h('code', {}, g.name)), withQueue ? td(h('a', { href: '#/queues/' + seg(g.queueName) }, g.queueName)) : null,
    tdn(g.totalLag, { 'data-test': 'group-lag' }), tdn(g.partitionsWithLag), td(secs(g.maxTimeLag), { class: 'num' }),
    td(g.subscriptionMode || '—'), td(g.state || '—'),
    td(h('button', { type: 'button', 'data-test': 'group-seek', onclick: () => seek.open(g.name, g.queueName) }, 'Seek…')));
}

function messageDetail() {
  const el = h('section', { class: 'panel', hidden: true, 'data-test': 'message-detail' });
  return {
    el,
    async show(partitionId, transactionId) {
      el.hidden = false;
      el.scrollIntoView({ block: 'start' });
      fill(el, h('h2', {}, 'Message ', h('code', {}, transactionId)), h('p', { class: 'muted' }, 'Loading…'));
      let m;
      let tr;
      try {
        [m, tr] = await Promise.all([
          api('/api/v1/messages/' + seg(partitionId) + '/' + seg(transactionId)),
          api('/api/v1/traces/' + seg(partitionId) + '/' + seg(transactionId)).catch((e) => ({ error: e })),
        ]);
      } catch (e) {
        fill(el, h('h2', {}, 'Message ', h('code', {}, transactionId)), h('p', { class: 'bad', 'data-test': 'message-error' }, e.message));
        return;
      }
      const groups = (m.consumerGroups || []).map((g) => h('tr', {}, td(h('code', {}, g.name)), td(g.status), td(g.consumed ? 'yes' : 'no'), td(when(g.leaseExpiresAt))));
      const traces = tr.error ? [emptyRow(5, tr.error.message)] : (tr.traces || []).length === 0 ? [emptyRow(5, 'No traces.')]
        : tr.traces.map((t) => h('tr', { 'data-test': 'trace-row' }, td(when(t.created_at)), td(t.event_type), td((t.trace_names || []).join(', ') || '—'),
          td(groupLabel(t.consumer_group) || '—'), td(h('span', { class: 'excerpt mono' }, excerpt(t.data)))));
      fill(el,
        h('h2', {}, 'Message ', h('code', {}, m.transactionId)),
        h('div', { class: 'grid2' },
          h('dl', { class: 'kv' },
            h('dt', {}, 'Queue'), h('dd', {}, m.queue), h('dt', {}, 'Partition'), h('dd', {}, m.partition),
            h('dt', {}, 'Offset'), h('dd', {}, num(m.offset)), h('dt', {}, 'Status'), h('dd', { 'data-test': 'message-status' }, m.status),
            h('dt', {}, 'Accepted'), h('dd', {}, when(m.createdAt)), h('dt', {}, 'Message id'), h('dd', { class: 'mono' }, m.id),
            h('dt', {}, 'Trace id'), h('dd', { class: 'mono' }, m.traceId || '—'), h('dt', {}, 'Producer'), h('dd', {}, m.producerSub || '—'),
            h('dt', {}, 'Encrypted'), h('dd', {}, m.isEncrypted ? 'yes (decrypted here)' : 'no'),
            m.errorMessage ? [h('dt', {}, 'Last error'), h('dd', { class: 'bad' }, m.errorMessage + ' (retries ' + num(m.retryCount) + ', ' + when(m.failedAt) + ')')] : null),
          h('div', {}, h('h3', {}, 'Consumer groups'), table(['Group', 'Status', 'Consumed', 'Lease until'], h('tbody', {}, groups.length ? groups : emptyRow(4, 'No group has read this partition.'))))),
        h('h3', {}, 'Payload'), h('pre', { class: 'payload', 'data-test': 'message-payload' }, pretty(m.payload)),
        h('h3', {}, 'Traces'), table(['Time', 'Event', 'Names', 'Group', 'Data'], h('tbody', {}, traces)));
    },
  };
}

const WINDOWS = [['1h', 'last hour', 3600], ['24h', 'last 24 hours', 86400], ['7d', 'last 7 days', 7 * 86400], ['all', 'all time', 0]];

function queueView(name) {
  const c = {
    partitions: card('q-partitions', 'Partitions'),
    pending: card('q-pending', 'Pending'),
    processing: card('q-processing', 'Processing'),
    total: card('q-total', 'Messages'),
    dead: card('q-dead', 'Dead letters'),
    groups: card('q-groups', 'Consumer groups'),
  };
  const partBody = h('tbody');
  const groupBody = h('tbody');
  const options = h('dl', { class: 'kv wide', 'data-test': 'q-options' });
  const msgBody = h('tbody');
  const seek = seekPanel(() => tick());
  const detail = messageDetail();
  const win = h('select', { 'data-test': 'msg-window' }, WINDOWS.map(([v, label]) => h('option', { value: v, selected: v === '24h' }, label)));
  const status = h('select', { 'data-test': 'msg-status' }, [['', 'any status'], ['pending', 'pending'], ['processing', 'processing'], ['completed', 'completed'], ['dead_letter', 'dead letter']]
    .map(([v, l]) => h('option', { value: v }, l)));
  const partSel = h('select', { 'data-test': 'msg-partition' }, h('option', { value: '' }, 'any partition'));
  const lookupTx = h('input', { type: 'text', placeholder: 'transactionId', size: 36, 'data-test': 'lookup-tx' });
  const lookupNote = h('span', { class: 'note', 'data-test': 'lookup-note' });
  let partitions = [];
  const lookup = async (ev) => {
    ev.preventDefault();
    const tx = lookupTx.value.trim();
    if (!tx) return;
    // The message is found by (partitionId, transactionId): ask each partition of the queue (the chosen one first).
    const cands = partSel.value ? partitions.filter((p) => p.name === partSel.value) : partitions;
    lookupNote.textContent = 'Looking in ' + cands.length + ' partition(s)…';
    for (let i = 0; i < cands.length; i += 8) {
      const found = await Promise.all(cands.slice(i, i + 8).map((p) => api('/api/v1/messages/' + seg(p.id) + '/' + seg(tx)).then(() => p, () => null)));
      const p = found.find(Boolean);
      if (p) {
        lookupNote.textContent = 'Found in partition ' + p.name + '.';
        await detail.show(p.id, tx);
        return;
      }
    }
    lookupNote.textContent = 'No message with transactionId "' + tx + '" in ' + (partSel.value ? 'partition ' + partSel.value : 'this queue')
      + ' (a message older than its dedup window that nobody holds is found only in the list).';
  };
  for (const x of [win, status, partSel]) x.addEventListener('change', () => tick());
  const el = h('div', {},
    h('div', { class: 'crumbs' }, h('a', { href: '#/queues' }, 'Queues'), ' / ', name),
    h('h1', {}, 'Queue ', h('code', { 'data-test': 'q-name' }, name)),
    h('div', { class: 'cards' }, Object.values(c).map((x) => x.el)),
    panel('Partitions', table(['Partition', ['Depth', 'num'], ['Ready', 'num'], ['Pending', 'num'], ['Processing', 'num'], ['Completed', 'num'],
      ['Dead letters', 'num'], ['Next offset', 'num'], 'Oldest', 'Newest', 'Lag by group'], partBody),
    h('p', { class: 'note' }, 'Depth and pending, processing, completed are queue mode\'s view; ready is what the worst consuming group could pop now; lag by group is the stored messages at or past the group\'s cursor, for the first ' + num(LAG_GROUPS) + ' groups by name.')),
    h('div', { class: 'grid2' },
      panel('Consumer groups', table(['Group', ['Lag', 'num'], ['Partitions lagging', 'num'], ['Time lag', 'num'], 'Mode', 'State', ''], groupBody),
        h('p', { class: 'note' }, STATE_NOTE)),
      panel('Options', options, h('p', { class: 'note' }, 'Read-only; change them with POST /api/v1/configure (a full replace).'))),
    seek.el,
    panel('Newest messages',
      h('form', { class: 'filters', onsubmit: lookup },
        h('label', {}, 'Created', win), h('label', {}, 'Status', status), h('label', {}, 'Partition', partSel),
        h('label', {}, 'Find by transactionId', lookupTx), h('button', { type: 'submit', 'data-test': 'lookup-submit' }, 'Find'), lookupNote),
      table(['Accepted', 'Partition', ['Offset', 'num'], 'Transaction id', 'Status', 'Trace id'], msgBody),
      h('p', { class: 'note' }, 'The newest 50, newest first. Click one for its payload and traces.')),
    detail.el);
  return {
    el,
    async tick() {
      let q;
      try {
        q = await api('/api/v1/resources/queues/' + seg(name) + query({ lagGroups: LAG_GROUPS }));
      } catch (e) {
        if (e.status === 404) {
          fill(partBody, emptyRow(11, 'Queue not found.'));
          return;
        }
        throw e;
      }
      const w = WINDOWS.find((x) => x[0] === win.value);
      const from = w[2] ? new Date(Date.now() - w[2] * 1000).toISOString() : '1970-01-01T00:00:00Z';
      const [depth, groups, msgs] = await Promise.all([
        api('/api/v1/resources/queues/' + seg(name) + '/depth').catch(() => null),
        // The groups of this queue only, up to the route's largest page
        // (GET /api/v1/consumer-groups is paged: 100 entries by default).
        api('/api/v1/consumer-groups' + query({ queue: name, limit: GROUPS_MAX })),
        api('/api/v1/messages' + query({ queue: name, limit: 50, from, status: status.value, partition: partSel.value })),
      ]);
      partitions = q.partitions || [];
      const ready = new Map(((depth && depth.partitions) || []).map((p) => [p.partition, p.ready]));
      let dead = 0;
      for (const p of partitions) dead += (p.stats && p.stats.deadLetter) || 0;
      const mine = (groups || []).filter((g) => g.queueName === name);
      const t = q.totals || {};
      c.partitions.set(num(partitions.length), partitions.length);
      c.pending.set(num(t.pending), t.pending);
      c.processing.set(num(t.processing), t.processing);
      c.total.set(num(t.total), t.total);
      c.dead.set(num(dead), dead, '', dead > 0 ? 'alert' : '');
      const cut = (groups || []).length >= GROUPS_MAX;
      c.groups.set(num(mine.length) + (cut ? '+' : ''), mine.length,
        [mine.some((g) => g.name === QUEUE_MODE) ? 'queue mode included' : '', cut ? 'the first ' + num(GROUPS_MAX) + ' shown' : ''].filter(Boolean).join('; '));
      fill(partBody, partitions.length === 0 ? emptyRow(11, 'No partitions.') : partitions.map((p) => {
        const s = p.stats || {};
        // p.lag holds the first LAG_GROUPS groups by name with a cursor on
        // the partition; lagTruncated says more have one (their lag is in
        // Consumer groups below, summed over the queue's partitions).
        const lag = Object.entries(p.lag || {}).map(([g, n]) => groupLabel(g) + ': ' + num(n)).join(', ')
          + (p.lagTruncated ? ', … (the first ' + num(LAG_GROUPS) + ' groups by name)' : '');
        return h('tr', { 'data-test': 'part-row', 'data-partition': p.name },
          td(p.name), tdn(p.depth, { 'data-test': 'part-depth' }), tdn(ready.has(p.name) ? ready.get(p.name) : null),
          tdn(s.pending), tdn(s.processing), tdn(s.completed), tdn(s.deadLetter), tdn(p.nextOffset),
          td(when(p.oldestMessage)), td(when(p.newestMessage)), td(lag || '—', { 'data-test': 'part-lag' }));
      }));
      fill(groupBody, mine.length === 0 ? emptyRow(7, 'No consumer group has read this queue.') : mine.map((g) => groupRow(g, seek, false)));
      fill(options, Object.entries(q.options || {}).map(([k, v]) => [h('dt', {}, k), h('dd', { 'data-option': k }, String(v))]));
      const names = partitions.map((p) => p.name);
      const cur = partSel.value;
      if (partSel.options.length !== names.length + 1) {
        fill(partSel, h('option', { value: '' }, 'any partition'), names.map((n) => h('option', { value: n, selected: n === cur }, n)));
      }
      const list = msgs.messages || [];
      fill(msgBody, list.length === 0 ? emptyRow(6, 'No messages in this window.') : list.map((m) => h('tr', {
        class: 'click', 'data-test': 'msg-row', 'data-tx': m.transactionId,
        onclick: () => detail.show(m.partitionId, m.transactionId),
      }, td(when(m.createdAt)), td(m.partition), tdn(m.offset), td(h('code', {}, m.transactionId)), td(m.status), td(m.traceId || '—', { class: 'mono' }))));
    },
  };
}

function localToISO(v) {
  return v ? new Date(v).toISOString() : '';
}

function dlqView() {
  const PAGE = 50;
  const queue = h('select', { name: 'queue', 'data-test': 'dlq-queue' }, h('option', { value: '' }, 'any queue'));
  const group = h('input', { type: 'text', name: 'consumerGroup', placeholder: 'any group', 'data-test': 'dlq-group' });
  const from = h('input', { type: 'datetime-local', step: 1, 'data-test': 'dlq-from' });
  const to = h('input', { type: 'datetime-local', step: 1, 'data-test': 'dlq-to' });
  const total = h('span', { 'data-test': 'dlq-total' });
  const pageInfo = h('span', { class: 'muted' });
  const body = h('tbody');
  const detail = h('section', { class: 'panel', hidden: true, 'data-test': 'dlq-detail' });
  let applied = {};
  let offset = 0;
  const prev = h('button', { type: 'button', onclick: () => { offset = Math.max(0, offset - PAGE); tick(); } }, '← Newer');
  const next = h('button', { type: 'button', onclick: () => { offset += PAGE; tick(); } }, 'Older →');
  const apply = (ev) => {
    ev.preventDefault();
    applied = { queue: queue.value, consumerGroup: group.value.trim(), from: localToISO(from.value), to: localToISO(to.value) };
    offset = 0;
    tick();
  };
  const clear = () => {
    queue.value = '';
    group.value = '';
    from.value = '';
    to.value = '';
    applied = {};
    offset = 0;
    tick();
  };
  const el = h('div', {}, h('h1', {}, 'Dead letters'),
    panel('Dead-letter queue',
      h('form', { class: 'filters', onsubmit: apply, 'data-test': 'dlq-filters' },
        h('label', {}, 'Queue', queue), h('label', {}, 'Consumer group', group),
        h('label', {}, 'Failed from', from), h('label', {}, 'Failed until', to),
        h('button', { type: 'submit', class: 'primary', 'data-test': 'dlq-apply' }, 'Apply'),
        h('button', { type: 'button', onclick: clear }, 'Clear')),
      h('p', {}, total),
      table(['Failed at', 'Queue', 'Partition', 'Group', 'Transaction id', 'Error', ['Retries', 'num'], 'Payload'], body),
      h('div', { class: 'pager' }, prev, next, pageInfo)),
    detail);
  let queuesLoaded = false;
  return {
    el,
    async tick() {
      if (!queuesLoaded) {
        // The first 1,000 queues by name (the route's largest page).
        const qs = await api('/api/v1/resources/queues' + query({ limit: QUEUES_MAX }));
        const cur = queue.value;
        fill(queue, h('option', { value: '' }, 'any queue'), (qs.queues || []).map((q) => h('option', { value: q.name, selected: q.name === cur }, q.name)));
        queuesLoaded = true;
      }
      const r = await api('/api/v1/dlq' + query({ ...applied, limit: PAGE, offset }));
      const rows = r.messages || [];
      total.textContent = num(r.total) + ' dead letter' + (r.total === 1 ? '' : 's') + (applied.queue || applied.consumerGroup || applied.from || applied.to ? ' matching the filters' : '');
      total.dataset.value = String(r.total);
      pageInfo.textContent = rows.length ? (offset + 1) + '–' + (offset + rows.length) + ' of ' + num(r.total) : '';
      prev.disabled = offset === 0;
      next.disabled = offset + rows.length >= r.total;
      fill(body, rows.length === 0 ? emptyRow(8, 'No dead letters.') : rows.map((m) => h('tr', {
        class: 'click', 'data-test': 'dlq-row', 'data-tx': m.transactionId,
        onclick: () => {
          detail.hidden = false;
          fill(detail, h('h2', {}, 'Dead letter ', h('code', {}, m.transactionId)),
            h('dl', { class: 'kv' }, h('dt', {}, 'Queue'), h('dd', {}, m.queue + ' / ' + m.partition), h('dt', {}, 'Group'), h('dd', {}, m.consumerGroup),
              h('dt', {}, 'Failed at'), h('dd', {}, when(m.failedAt)), h('dt', {}, 'Error'), h('dd', { class: 'bad' }, m.errorMessage || '—'),
              h('dt', {}, 'Accepted'), h('dd', {}, when(m.createdAt)), h('dt', {}, 'Offset'), h('dd', {}, num(m.offset))),
            h('h3', {}, 'Payload'), h('pre', { class: 'payload' }, pretty(m.data)));
        },
      }, td(when(m.failedAt)), td(m.queue), td(m.partition), td(groupLabel(m.consumerGroup)),
      td(h('code', {}, m.transactionId)), td(m.errorMessage || '—', { class: 'bad' }), tdn(m.retryCount),
      td(h('span', { class: 'excerpt mono' }, excerpt(m.data))))));
    },
  };
}

// GROUPS_PAGE is the groups page's page size, GROUPS_MAX the largest
// limit GET /api/v1/consumer-groups serves (docs/api.md): a queue's page
// lists at most that many of its groups.
const GROUPS_PAGE = 100;
// QUEUES_PAGE and QUEUES_MAX are the same for GET /api/v1/resources/queues.
const QUEUES_PAGE = 100;
const QUEUES_MAX = 1000;
const GROUPS_MAX = 1000;
// LAG_GROUPS is how many groups' lag a queue's partition row shows (the
// lagGroups of GET /api/v1/resources/queues/:q, which serves at most 100).
const LAG_GROUPS = 10;

// STATE_NOTE says what GET /api/v1/consumer-groups' state means (docs/api.md).
const STATE_NOTE = 'State: Dead when the time lag is over 300 s and no consumer of the group holds a lease on the queue; '
  + 'Lagging when it is over 300 s while one does; Stable otherwise.';

function groupsView() {
  const body = h('tbody');
  const seek = seekPanel(() => tick());
  const summary = h('p', { 'data-test': 'groups-summary' });
  const pageInfo = h('span', { class: 'muted', 'data-test': 'groups-page' });
  let offset = 0;
  // The route is paged (GROUPS_PAGE entries by group, then queue name) and
  // answers a bare array without a total, so "Next" is offered while a
  // page is full.
  const prev = h('button', { type: 'button', 'data-test': 'groups-prev', onclick: () => { offset = Math.max(0, offset - GROUPS_PAGE); tick(); } }, '← Previous');
  const next = h('button', { type: 'button', 'data-test': 'groups-next', onclick: () => { offset += GROUPS_PAGE; tick(); } }, 'Next →');
  const el = h('div', {}, h('h1', {}, 'Consumer groups'), seek.el,
    panel('Groups by queue', summary, table(['Group', 'Queue', ['Lag', 'num'], ['Partitions lagging', 'num'], ['Time lag', 'num'], 'Mode', 'State', ''], body),
      h('div', { class: 'pager' }, prev, next, pageInfo),
      h('p', { class: 'note' }, 'One row per group and queue it reads, by group name, ' + GROUPS_PAGE + ' a page. Lag is messages past the group\'s cursors; time lag is, on the partitions with lag, '
        + 'the longest time since the group last consumed there. ' + STATE_NOTE)));
  return {
    el,
    async tick() {
      const [ov, page] = await Promise.all([api('/api/v1/resources/overview'),
        api('/api/v1/consumer-groups' + query({ limit: GROUPS_PAGE, offset }))]);
      let groups = page || [];
      if (groups.length === 0 && offset > 0) {
        // The list shrank under this page: go back to its start.
        offset = 0;
        groups = (await api('/api/v1/consumer-groups' + query({ limit: GROUPS_PAGE }))) || [];
      }
      // The overview's "Consumer groups" counts distinct named groups
      // (queue mode is not a group): say how this list relates to it.
      const named = ov.consumerGroups;
      fill(summary, h('strong', { 'data-test': 'groups-named', 'data-value': named }, num(named)),
        named === 1 ? ' named group' : ' named groups', ' (the overview\'s count), listed one row per queue it reads;',
        ' queue mode (consumers without a group) has rows of its own, one per queue, not counted as groups.');
      pageInfo.textContent = groups.length ? 'rows ' + (offset + 1) + '–' + (offset + groups.length) : '';
      prev.disabled = offset === 0;
      next.disabled = groups.length < GROUPS_PAGE;
      fill(body, groups.length === 0 ? emptyRow(8, 'No consumer groups yet.') : groups.map((g) => groupRow(g, seek, true)));
    },
  };
}

// ---------- router ----------

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '').map(decodeURIComponent);
  const [top, arg] = parts;
  switch (top) {
    case undefined:
    case 'overview': return ['overview', overviewView];
    case 'pipeline': return ['pipeline', pipelineView];
    case 'queues': return arg ? ['queues', () => queueView(arg)] : ['queues', queuesView];
    case 'dlq': return ['dlq', dlqView];
    case 'groups': return ['groups', groupsView];
    default: return ['overview', overviewView];
  }
}

function mount() {
  if (state.view && state.view.destroy) state.view.destroy();
  const [name, make] = route();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.route === name);
  const v = make();
  state.view = v;
  lastGood = null;
  document.getElementById('stale').hidden = true;
  document.getElementById('main').replaceChildren(v.el);
  if (v.mounted) v.mounted();
  if (v.draw) v.draw();
  tick();
}

window.addEventListener('hashchange', mount);
document.getElementById('signout').addEventListener('click', () => {
  signOut();
  location.reload();
});
mount();
