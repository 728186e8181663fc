// The Lockstep dashboard: plain JavaScript over the coordinator's read-only
// JSON API (/api/v1/). Every view has a stable hash URL:
//   #/jobs?state=&verdict=&model=&label=   #/jobs/<id>   #/certificates
//   #/fleet                       #/audits      #/audits/<id>
// Polling is one timer at a time, re-armed only after the previous answer
// arrived, and only while something is still running.
'use strict';

const POLL_MS = 2000;
let pollTimer = null;
let viewToken = 0;  // bumps on every navigation; stale answers are dropped

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// With bearer tokens on, the API answers 401 until the tab has a token:
// asked for once per page load, kept for the tab (sessionStorage).
let tokenAsked = false;

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem('lockstepToken');
  if (token) headers['Authorization'] = 'Bearer ' + token;
  const r = await fetch('/api/v1/' + path, {cache: 'no-store', headers});
  if (r.status === 401 && !tokenAsked) {
    tokenAsked = true;
    const t = window.prompt('This coordinator needs a bearer token (viewer or above):');
    if (t && t.trim()) {
      sessionStorage.setItem('lockstepToken', t.trim());
      tokenAsked = false;
      return api(path);
    }
  }
  let body = null;
  try { body = await r.json(); } catch (e) { body = {message: r.statusText}; }
  if (!r.ok) throw new Error((body && body.message) || ('HTTP ' + r.status));
  return body;
}

const short = (s, n = 12) => (s && s.length > n ? s.slice(0, n) + '…' : (s || ''));
const when = (ms) => (ms && ms !== '0' ? new Date(Number(ms)).toLocaleString() : '—');
const badge = (v) => h('span', {class: 'badge ' + v}, String(v).replace(/^(JOB_|RUN_|WORKER_|AUDIT_)/, ''));
const plain = (v) => String(v || '').replace(/^PHASE_/, '').toLowerCase();

function setStatus(text) { document.getElementById('status').textContent = text; }

function poll(fn) {
  clearTimeout(pollTimer);
  const token = viewToken;
  pollTimer = setTimeout(() => { if (token === viewToken) fn(); }, POLL_MS);
}

function render(...nodes) {
  const app = document.getElementById('app');
  app.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

function failure(e) {
  render(h('p', {class: 'error', id: 'error'}, 'Error: ' + e.message));
}

// ---------------------------------------------------------------- Jobs list

function progress(run) {
  const total = Number(run.stepsTotal) || 0;
  const done = Number(run.stepsDone) || 0;
  const pct = total ? Math.round(100 * done / total) : 0;
  return h('div', {class: 'run-progress', title: run.runId + ': ' + done + '/' + total},
    h('span', {class: 'progress'}, h('span', {style: 'width:' + pct + '%'})),
    h('span', {class: 'mono ' + run.state}, done + '/' + total));
}

async function jobsView(params) {
  const token = viewToken;
  const q = new URLSearchParams({page_size: '50'});
  if (params.get('state')) q.set('state', params.get('state'));
  if (params.get('model')) q.set('model_digest', params.get('model'));
  if (params.get('verdict')) q.set('verdict', params.get('verdict'));
  if (params.get('label')) q.append('label', params.get('label'));
  if (params.get('page')) q.set('page_token', params.get('page'));
  const form = h('form', {class: 'filters', id: 'job-filters', onsubmit: (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const p = new URLSearchParams();
    for (const k of ['state', 'verdict', 'model', 'label']) if (f.get(k)) p.set(k, f.get(k));
    location.hash = '#/jobs' + (p.toString() ? '?' + p : '');
  }},
    h('label', {}, 'State', h('select', {name: 'state'},
      ['', 'JOB_QUEUED', 'JOB_RUNNING', 'JOB_SUCCEEDED', 'JOB_FAILED', 'JOB_CANCELLED'].map(
        (s) => h('option', {value: s, selected: s === (params.get('state') || '')}, s || 'any')))),
    h('label', {}, 'Verdict', h('select', {name: 'verdict'},
      ['', 'REPRODUCIBLE', 'NONDETERMINISTIC', 'FAILED', 'INCONCLUSIVE'].map(
        (s) => h('option', {value: s, selected: s === (params.get('verdict') || '')}, s || 'any')))),
    h('label', {}, 'Model digest', h('input', {name: 'model', size: 34, value: params.get('model') || '', placeholder: '32 hex digits'})),
    h('label', {}, 'Label', h('input', {name: 'label', value: params.get('label') || '', placeholder: 'key=value'})),
    h('button', {type: 'submit'}, 'Filter'));
  let list;
  try { list = await api('jobs?' + q); } catch (e) { return failure(e); }
  if (token !== viewToken) return;
  const rows = (list.jobs || []).map((j) => h('tr', {'data-job': j.jobId},
    h('td', {}, h('a', {href: '#/jobs/' + j.jobId, class: 'mono'}, j.jobId)),
    h('td', {}, h('a', {href: '#/jobs?model=' + j.modelDigest, title: j.modelDigest}, j.spec.model.name || short(j.modelDigest))),
    h('td', {}, plain(j.spec.config.determinism) || 'canonical'),
    h('td', {}, badge(j.state)),
    h('td', {}, (j.runs || []).map(progress)),
    h('td', {}, Object.entries(j.spec.labels || {}).map(([k, v]) =>
      h('a', {class: 'badge', href: '#/jobs?label=' + encodeURIComponent(k + '=' + v)}, k + '=' + v))),
    h('td', {class: 'muted'}, when(j.createdUnixMs))));
  const next = list.nextPageToken ? (() => {
    const p = new URLSearchParams(params); p.set('page', list.nextPageToken);
    return h('p', {}, h('a', {href: '#/jobs?' + p}, 'Older jobs →'));
  })() : null;
  render(h('h1', {}, 'Jobs'), form,
    rows.length ? h('table', {id: 'jobs'}, h('tr', {}, ['Job', 'Model', 'Mode', 'State', 'Runs', 'Labels', 'Created'].map((t) => h('th', {}, t))), rows)
      : h('p', {class: 'muted'}, 'No jobs match.'), next);
  const live = (list.jobs || []).some((j) => j.state === 'JOB_QUEUED' || j.state === 'JOB_RUNNING');
  setStatus(live ? 'live: refreshing every 2 s' : '');
  if (live) poll(() => jobsView(params));
}

// ---------------------------------------------------------------- Job page

function agreementMatrix(job, report) {
  const digests = (report && report.runDigests) || {};
  const runs = job.runs || [];
  if (!runs.length) return null;
  const head = h('tr', {}, h('th', {}, ''), runs.map((r) => h('th', {}, 'run ' + r.index)));
  const body = runs.map((a) => h('tr', {}, h('th', {}, 'run ' + a.index), runs.map((b) => {
    const da = digests[a.runId], db = digests[b.runId];
    if (!da || !db) return h('td', {class: 'muted'}, '·');
    return da === db ? h('td', {class: 'agree', title: 'bit-identical'}, '=')
                     : h('td', {class: 'disagree', title: 'differ'}, '≠');
  })));
  return h('table', {class: 'matrix', id: 'agreement'}, head, body);
}

function divergencePanel(d) {
  if (!d) return null;
  const t = d.tensor || {};
  const m = d.magnitude || {};
  const cause = d.cause || {};
  return h('div', {class: 'panel', id: 'first-divergence', 'data-step': d.step, 'data-layer': t.layer,
      'data-op': t.op, 'data-cause': cause.id || ''},
    h('h2', {}, 'First divergence'),
    h('dl', {class: 'kv'},
      h('dt', {}, 'runs'), h('dd', {class: 'mono'}, d.runA + ' vs ' + d.runB),
      h('dt', {}, 'step'), h('dd', {}, d.step),
      h('dt', {}, 'layer'), h('dd', {}, t.layer || '(batch)'),
      h('dt', {}, 'phase'), h('dd', {class: 'phase-' + plain(t.phase)}, plain(t.phase)),
      h('dt', {}, 'op'), h('dd', {class: 'mono', id: 'divergence-op'}, t.op),
      h('dt', {}, 'role'), h('dd', {}, t.role + (t.slot ? ' (' + t.slot + ')' : '')),
      h('dt', {}, 'shape'), h('dd', {class: 'mono'}, '[' + (t.shape || []).join(', ') + ']'),
      h('dt', {}, 'magnitude'), h('dd', {class: 'mono'},
        'sum ' + Number(m.sumRel || 0).toExponential(2) + ', l2 ' + Number(m.l2Rel || 0).toExponential(2) +
        ', max|x| ' + Number(m.maxAbsRel || 0).toExponential(2) + ' (relative)'),
      h('dt', {}, 'cause'), h('dd', {id: 'divergence-cause'}, cause.id ? [h('b', {}, cause.id), ' — ', cause.text] : 'not inferred'),
      h('dt', {}, 'downstream'), h('dd', {}, (d.downstreamDiffering || 0) + ' later tensors differ too, of ' + (d.tensorsCompared || 0) + ' compared')));
}

function heatmap(map) {
  if (!map.steps.length) return h('p', {class: 'muted'}, 'No steps stored for both runs yet.');
  const first = map.first;
  const stride = Math.max(1, Math.ceil(map.steps.length / 25));
  const head = h('tr', {class: 'steps'}, h('th', {}, 'step →'), map.steps.map((s, i) =>
    h('th', {}, i % stride === 0 ? s : '')));
  const rows = map.rows.map((r, ri) => h('tr', {'data-row': ri, 'data-layer': r.layer, 'data-phase': r.phase},
    h('th', {class: 'row-label'}, h('span', {class: 'phase phase-' + r.phase}, r.phase.slice(0, 3)), r.layer),
    map.steps.map((s, si) => {
      const n = map.differing[si][ri];
      const isFirst = first && first.step === s && first.row === ri;
      return h('td', {class: 'c' + (n ? ' d' : '') + (isFirst ? ' first' : ''), 'data-step': s,
        'data-differing': n, id: isFirst ? 'first-divergence-cell' : null,
        title: r.layer + ' ' + r.phase + ', step ' + s + ': ' + n + ' of ' + r.tensors + ' tensors differ'});
    })));
  // Cells as wide as the page allows: 8 to 24 px.
  const cw = Math.max(8, Math.min(24, Math.floor(900 / map.steps.length)));
  return h('div', {class: 'heatmap', id: 'divergence-map', 'data-differing-total': map.differingTotal, style: '--cw:' + cw + 'px'},
    h('table', {}, head, rows),
    h('p', {class: 'legend muted'},
      h('span', {}, h('i', {style: 'background:var(--cell)'}), 'identical'),
      h('span', {}, h('i', {style: 'background:var(--diff)'}), 'differs'),
      h('span', {}, h('i', {style: 'background:var(--first)'}), 'first divergence'),
      h('span', {class: 'phase-forward'}, 'for = forward'), h('span', {class: 'phase-backward'}, 'bac = backward'),
      h('span', {class: 'phase-optimizer'}, 'opt = optimizer'),
      map.truncated ? h('span', {}, 'first ' + map.steps.length + ' steps shown') : null));
}

function lossChart(loss) {
  const runs = (loss.runs || []).filter((r) => r.loss.length);
  if (!runs.length) return h('p', {class: 'muted'}, 'No loss recorded yet.');
  const W = 560, H = 220, P = 36;
  let xs = [], ys = [];
  for (const r of runs) { xs = xs.concat(r.steps); ys = ys.concat(r.loss.filter((v) => v !== null)); }
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-12);
  const X = (v) => P + (W - 2 * P) * (v - x0) / (x1 - x0);
  const Y = (v) => H - P + -(H - 2 * P) * (v - y0) / (y1 - y0);
  const colors = ['#1e88e5', '#e53935', '#43a047', '#fb8c00', '#8e24aa', '#00897b'];
  return svg('svg', {class: 'chart', id: 'loss-chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`},
    svg('line', {class: 'axis', x1: P, y1: H - P, x2: W - P, y2: H - P}),
    svg('line', {class: 'axis', x1: P, y1: P, x2: P, y2: H - P}),
    svg('text', {x: P, y: H - 10}, 'step ' + x0), svg('text', {x: W - P - 40, y: H - 10}, 'step ' + x1),
    svg('text', {x: 4, y: P - 6}, y1.toPrecision(4)), svg('text', {x: 4, y: H - P + 12}, y0.toPrecision(4)),
    runs.map((r, i) => [
      svg('polyline', {fill: 'none', stroke: colors[i % colors.length], 'stroke-width': 1.5,
        'stroke-dasharray': i ? '4 3' : '', 'data-run': r.runId,
        points: r.steps.map((s, k) => r.loss[k] === null ? '' : X(s) + ',' + Y(r.loss[k])).join(' ')}),
      svg('text', {x: W - P - 90, y: P + 14 * i, fill: colors[i % colors.length]}, 'run ' + r.index)]));
}

async function jobView(id) {
  const token = viewToken;
  let job, report = null, map = null, loss = null;
  try { job = await api('jobs/' + encodeURIComponent(id)); } catch (e) { return failure(e); }
  const finished = !['JOB_QUEUED', 'JOB_RUNNING'].includes(job.state);
  const work = [];
  if (finished) work.push(api('jobs/' + id + '/report').then((r) => { report = r; }, () => {}));
  if ((job.runs || []).filter((r) => r.state === 'RUN_SUCCEEDED').length >= 2) {
    work.push(api('jobs/' + id + '/divergence_map').then((m) => { map = m; }, () => {}));
  }
  work.push(api('jobs/' + id + '/loss').then((l) => { loss = l; }, () => {}));
  await Promise.all(work);
  if (token !== viewToken) return;
  const cfg = job.spec.config || {};
  const runs = h('table', {id: 'runs'}, h('tr', {}, ['Run', 'State', 'Progress', 'Worker', 'Digest', 'Failure'].map((t) => h('th', {}, t))),
    (job.runs || []).map((r) => h('tr', {},
      h('td', {class: 'mono', title: r.runId}, r.index), h('td', {}, badge(r.state)), h('td', {}, progress(r)),
      h('td', {class: 'mono'}, short(r.workerId, 20)), h('td', {class: 'mono', title: r.runDigest}, short(r.runDigest, 16)),
      h('td', {class: 'bad'}, r.failureReason))));
  const verdict = report ? h('div', {class: 'panel', id: 'verdict', 'data-verdict': report.verdict},
    h('span', {class: 'badge ' + report.verdict}, report.verdict), ' ',
    report.level && report.level !== 'LEVEL_UNSPECIFIED' ? h('span', {class: 'badge good', id: 'level'}, report.level) : null,
    h('p', {}, report.summary),
    (report.certificateIds || []).length ? h('p', {}, 'Certificates: ', report.certificateIds.map((c) =>
      h('a', {class: 'mono', href: '#/certificates?id=' + c}, c + ' '))) : null)
    : h('div', {class: 'panel muted', id: 'verdict'}, finished ? 'No verdict stored.' : 'Verdict when every run has finished.');
  render(
    h('h1', {}, 'Job ', h('span', {class: 'mono'}, job.jobId), ' ', badge(job.state)),
    h('p', {class: 'muted'}, (job.spec.model.name || 'model') + ' · ' + (plain(cfg.determinism) || 'canonical') + ' · seed ' +
      (cfg.seed || 0) + ' · ' + (cfg.steps || 0) + ' steps · model ', h('span', {class: 'mono'}, short(job.modelDigest, 16)),
      job.failureReason ? h('span', {class: 'bad'}, ' · ' + job.failureReason) : null),
    verdict,
    h('div', {class: 'grid2'},
      h('section', {}, h('h2', {}, 'Runs'), runs, h('h2', {}, 'Run × run agreement'),
        agreementMatrix(job, report) || h('p', {class: 'muted'}, 'No runs.')),
      h('section', {}, h('h2', {}, 'Loss per run'), loss ? lossChart(loss) : h('p', {class: 'muted'}, '—'))),
    h('h2', {}, 'Divergence map', map ? h('span', {class: 'muted'}, ' — run ' + map.runA + ' vs ' + map.runB +
      ', ' + map.differingTotal + ' differing tensors') : null),
    map ? heatmap(map) : h('p', {class: 'muted'}, 'Needs two succeeded runs.'),
    divergencePanel(report && report.divergence));
  setStatus(finished ? '' : 'live: refreshing every 2 s');
  if (!finished) poll(() => jobView(id));
}

// -------------------------------------------------------------- Certificates

const LEVELS = ['LEVEL_UNSPECIFIED', 'RUN_TO_RUN', 'CROSS_DEVICE', 'CROSS_CLASS'];

async function certificatesView(params) {
  const token = viewToken;
  let list;
  try { list = await api('certificates?page_size=500'); } catch (e) { return failure(e); }
  if (token !== viewToken) return;
  const certs = list.certificates || [];
  const models = new Map(), classes = new Map(), best = new Map();
  for (const c of certs) {
    models.set(c.modelDigest, c.modelName || short(c.modelDigest));
    const cls = c.hardwareClassDigest ? [[c.hardwareClassDigest, c.hardwareClass]] : [['*', 'across classes']];
    for (const [d, name] of cls) {
      classes.set(d, name);
      const key = c.modelDigest + '|' + d;
      const prev = best.get(key);
      if (!prev || LEVELS.indexOf(c.level) > LEVELS.indexOf(prev.level)) best.set(key, c);
    }
  }
  const cols = [...classes.entries()];
  const matrix = h('table', {class: 'matrix', id: 'certificate-matrix'},
    h('tr', {}, h('th', {}, 'model ↓ / hardware class →'), cols.map(([d, name]) => h('th', {title: name}, short(name.replace(/^lockstep-class\//, ''), 28)))),
    [...models.entries()].map(([m, name]) => h('tr', {}, h('th', {title: m}, name),
      cols.map(([d]) => {
        const c = best.get(m + '|' + d);
        return c ? h('td', {}, h('a', {class: 'badge good', href: '#/certificates?id=' + c.certificateId, title: c.certificateId}, c.level))
                 : h('td', {class: 'muted'}, '—');
      }))));
  const sel = params.get('id') && certs.find((c) => c.certificateId === params.get('id'));
  render(h('h1', {}, 'Certificates'),
    certs.length ? matrix : h('p', {class: 'muted'}, 'No certificates yet.'),
    sel ? h('div', {class: 'panel', id: 'certificate'}, h('h2', {}, 'Certificate ', h('span', {class: 'mono'}, sel.certificateId)),
      h('dl', {class: 'kv'},
        h('dt', {}, 'level'), h('dd', {}, sel.level), h('dt', {}, 'model'), h('dd', {}, sel.modelName + ' ', h('span', {class: 'mono'}, sel.modelDigest)),
        h('dt', {}, 'config'), h('dd', {class: 'mono'}, sel.configDigest),
        h('dt', {}, 'hardware'), h('dd', {class: 'mono'}, sel.hardwareClass || (sel.hardwareClasses || []).join(' | ')),
        h('dt', {}, 'evidence'), h('dd', {}, (sel.evidenceJobIds || []).map((j) => h('a', {class: 'mono', href: '#/jobs/' + j}, j + ' '))),
        h('dt', {}, 'golden run digest'), h('dd', {class: 'mono'}, sel.goldenRunDigest),
        h('dt', {}, 'issued'), h('dd', {}, when(sel.issuedUnixMs)))) : null);
  setStatus('');
}

// --------------------------------------------------------------------- Fleet

async function fleetView() {
  const token = viewToken;
  let workers, audits;
  try {
    [workers, audits] = await Promise.all([api('workers?include_gone=true'), api('audits?page_size=50')]);
  } catch (e) { return failure(e); }
  if (token !== viewToken) return;
  // Each worker's newest audit result (audits come newest first).
  const outcome = new Map();
  for (const a of audits.audits || []) {
    for (const r of a.workers || []) if (!outcome.has(r.workerId)) outcome.set(r.workerId, {audit: a, result: r});
  }
  const groups = new Map();
  for (const w of workers.workers || []) {
    const d = w.profile.hardwareClassDigest || '';
    if (!groups.has(d)) groups.set(d, {name: w.profile.hardwareClass, workers: []});
    groups.get(d).workers.push(w);
  }
  const sections = [...groups.entries()].map(([d, g]) => h('section', {'data-class': d},
    h('h2', {}, 'Hardware class ', h('span', {class: 'mono', title: g.name}, short(d, 16))),
    h('p', {class: 'mono muted'}, short(g.name, 160)),
    h('table', {}, h('tr', {}, ['Worker', 'State', 'Admin', 'Selftest', 'Last audit', 'Last heartbeat', 'History'].map((t) => h('th', {}, t))),
      g.workers.map((w) => {
        const o = outcome.get(w.workerId);
        const st = w.profile.selftest;
        const fault = w.profile.injectingFault;
        return h('tr', {'data-worker': w.name, class: 'worker'},
          h('td', {}, h('b', {}, w.name), ' ', h('span', {class: 'mono muted'}, w.workerId),
            fault && fault.layer ? h('div', {class: 'badge warn', title: 'injects a fault'}, 'fault drill: step ' + fault.step + ' ' + fault.layer) : null),
          h('td', {}, badge(w.state)),
          h('td', {}, badge(w.adminState === 'WORKER_ADMIN_STATE_UNSPECIFIED' ? 'ACTIVE' : w.adminState),
            w.adminReason ? h('div', {class: 'muted'}, w.adminReason) : null),
          h('td', {}, st ? h('span', {class: st.passed ? 'passed' : 'failed', title: st.summary}, st.passed ? 'passed' : 'failed') : h('span', {class: 'muted'}, 'not run')),
          h('td', {class: 'audit-outcome', 'data-health': o ? o.result.health : ''}, o ? [h('a', {href: '#/audits/' + o.audit.auditId}, badge(o.result.health)),
            o.result.quarantined ? h('span', {class: 'bad'}, ' quarantined') : null] : h('span', {class: 'muted'}, 'never audited')),
          h('td', {class: 'muted'}, when(w.lastHeartbeatUnixMs)),
          h('td', {}, h('button', {type: 'button', onclick: (e) => showHistory(e.target, w.workerId)}, 'show')));
      }))));
  render(h('h1', {}, 'Fleet'), h('p', {class: 'muted'}, (workers.workers || []).length + ' workers in ' + groups.size + ' hardware classes'),
    sections.length ? sections : h('p', {class: 'muted'}, 'No workers.'));
  setStatus('live: refreshing every 2 s');
  poll(fleetView);
}

async function showHistory(button, workerId) {
  const cell = button.parentElement;
  let hist;
  try { hist = await api('workers/' + encodeURIComponent(workerId) + '/history?limit=20'); } catch (e) { cell.append(h('div', {class: 'error'}, e.message)); return; }
  clearTimeout(pollTimer);  // keep the opened history on screen
  setStatus('paused while a history is open');
  cell.replaceChildren(h('ul', {class: 'timeline'}, (hist.events || []).map((e) =>
    h('li', {}, h('span', {class: 'muted'}, when(e.atUnixMs)), ' ', h('b', {}, e.kind), ' ', e.detail))));
}

// -------------------------------------------------------------------- Audits

function tensorText(d) {
  if (!d || !d.tensor) return '';
  const t = d.tensor;
  return 'step ' + d.step + ', ' + (t.layer || '(batch)') + ' ' + plain(t.phase) + ' ' + t.role + ' (' + t.op + ')';
}

function auditDetail(a) {
  return h('div', {class: 'panel audit', 'data-audit': a.auditId},
    h('h2', {}, h('a', {href: '#/audits/' + a.auditId, class: 'mono'}, a.auditId), ' ', badge(a.state),
      ' ', h('span', {class: 'muted'}, (a.spec.workload || (a.spec.modelName ? 'model ' + a.spec.modelName : '')) + ' · ' + when(a.startedUnixMs))),
    h('p', {}, a.summary, a.noMajority ? h('b', {class: 'warn'}, ' (no majority)') : null),
    h('table', {}, h('tr', {}, ['Worker', 'Class', 'Vote', 'First tensor leaving the majority', 'Quarantined'].map((t) => h('th', {}, t))),
      (a.workers || []).map((r) => h('tr', {'data-worker': r.workerName, 'data-health': r.health},
        h('td', {}, r.workerName, ' ', h('span', {class: 'mono muted'}, r.workerId)),
        h('td', {class: 'mono'}, short(r.hardwareClassDigest, 12)),
        h('td', {}, badge(r.health)),
        h('td', {}, tensorText(r.divergence)),
        h('td', {}, r.quarantined ? h('span', {class: 'bad'}, 'yes') : 'no')))),
    (a.classes || []).length ? h('p', {class: 'muted'}, a.classes.map((c) =>
      short(c.hardwareClassDigest, 12) + ': ' + c.agreeing + ' of ' + c.workers + ' agree' +
      (c.agreesWithOtherClasses ? '' : ' (differs from other classes)')).join(' · ')) : null);
}

async function auditsView(id) {
  const token = viewToken;
  let audits;
  try {
    audits = id ? [await api('audits/' + encodeURIComponent(id))] : ((await api('audits?page_size=50')).audits || []);
  } catch (e) { return failure(e); }
  if (token !== viewToken) return;
  render(h('h1', {}, id ? 'Audit' : 'Audits'), audits.length ? audits.map(auditDetail) : h('p', {class: 'muted'}, 'No audits yet.'));
  const live = audits.some((a) => a.state === 'AUDIT_RUNNING');
  setStatus(live ? 'live: refreshing every 2 s' : '');
  if (live) poll(() => auditsView(id));
}

// -------------------------------------------------------------------- Router

function route() {
  viewToken++;
  clearTimeout(pollTimer);
  setStatus('');
  const hash = location.hash.replace(/^#/, '') || '/jobs';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === parts[0]);
  document.body.dataset.view = parts[0] || 'jobs';
  switch (parts[0]) {
    case 'jobs': return parts[1] ? jobView(decodeURIComponent(parts[1])) : jobsView(params);
    case 'certificates': return certificatesView(params);
    case 'fleet': return fleetView();
    case 'audits': return auditsView(parts[1] ? decodeURIComponent(parts[1]) : null);
    default: render(h('p', {class: 'error'}, 'No such page: ' + hash));
  }
}

window.addEventListener('hashchange', route);
route();
