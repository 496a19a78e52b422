// One run, live: its header (status, cost, answer), the questions its MCP
// servers ask (elicit.js), what its tools meant for the person rather than the
// model (`for_user` of a step's tool results: MCP content whose audience is
// the user), rollouts (each failed
// one with its reason), the text the models are generating (`token` events),
// aggregation, budget burn, signals and errors, and the selected rollout's
// trajectory and summary.  State is rebuilt from the run's event stream (which replays
// every stored event first), seeded by GET /v1/runs/{id}.

import { api, followEvents } from './api.js';
import { h, fill, badge, fmtCost, fmtTokens, tokensOf, clip, TERMINAL } from './dom.js';
import { budgetChart, voteView } from './charts.js';
import { trajectoryView } from './trajectory.js';
import { QuestionsPanel } from './elicit.js';

const TRAJECTORY_REFRESH_MS = 400;
const FINAL_DETAIL_TRIES = 20;
const FINAL_DETAIL_DELAY_MS = 250;
const LIVE_TEXT_CHARS = 4000;
const FOR_USER_CHARS = 4000;
const TERMINAL_ROLLOUT = new Set(['finished', 'failed', 'cancelled', 'exhausted']);

export class RunView {
  constructor(container, runId) {
    this.container = container;
    this.runId = runId;
    this.abort = new AbortController();
    this.info = null;
    this.request = null;
    this.result = null;
    this.rollouts = new Map();
    this.votes = [];
    this.budget = [];
    this.stepTokens = new Map();
    this.notes = [];
    this.forUser = new Map();
    this.summaries = new Map();
    this.startTs = null;
    this.live = 'connecting';
    this.selected = null;
    this.trajectory = null;
    this.trajectoryError = null;
    this.trajectoryTimer = null;
    this.frame = 0;
    this.trajectoryDirty = false;
    this.questions = new QuestionsPanel(runId, { label: (rid) => this.label(rid) });
  }

  base() {
    return `/v1/runs/${encodeURIComponent(this.runId)}`;
  }

  mount(rolloutId) {
    this.el = {
      status: h('span', {}),
      live: h('span', { class: 'live', testid: 'run-live' }),
      cancel: h('button', { type: 'button', testid: 'run-cancel', hidden: true, onclick: () => this.cancel() }, 'Cancel'),
      facts: h('dl', { class: 'facts' }),
      error: h('div', { class: 'error', testid: 'run-load-error', hidden: true }),
      rollouts: h('tbody', {}),
      aggregation: h('div', {}),
      budget: h('div', {}),
      notes: h('ul', { class: 'notes', testid: 'run-notes' }),
      forUser: h('ul', { class: 'for-user' }),
      forUserPanel: null,
      liveText: h('div', { testid: 'live-output' }),
      trajectory: h('div', { testid: 'trajectory-panel' }),
    };
    const panel = (title, ...body) => h('div', { class: 'panel' }, h('h3', {}, title), ...body);
    this.el.forUserPanel = h('div', { class: 'panel', testid: 'for-user', hidden: true }, h('h3', {}, 'For you'), this.el.forUser);
    fill(
      this.container,
      h(
        'section',
        { testid: 'run-view', dataset: { runId: this.runId } },
        h('nav', {}, h('a', { href: '#/', testid: 'back' }, '← Runs')),
        h(
          'div',
          { class: 'panel' },
          h('div', { class: 'panel-head' }, h('h2', { testid: 'run-id' }, this.runId), this.el.status, this.el.live, this.el.cancel),
          this.el.error,
          this.el.facts,
        ),
        this.questions.el,
        this.el.forUserPanel,
        h('div', { class: 'panel' }, h('h3', {}, 'Generating'), this.el.liveText),
        h(
          'div',
          { class: 'grid' },
          panel(
            'Rollouts',
            h(
              'table',
              { class: 'rollouts', testid: 'rollouts' },
              h('thead', {}, h('tr', {}, ['Rollout', 'Status', 'Steps', 'Tools', 'Answer', 'Cost'].map((t) => h('th', {}, t)))),
              this.el.rollouts,
            ),
          ),
          panel('Aggregation', this.el.aggregation),
          panel('Budget burn', this.el.budget),
          panel('Signals and errors', this.el.notes),
        ),
        h('div', { class: 'panel' }, this.el.trajectory),
      ),
    );
    this.selected = rolloutId || null;
    this.render();
    this.load();
  }

  unmount() {
    this.abort.abort();
    clearTimeout(this.trajectoryTimer);
    cancelAnimationFrame(this.frame);
  }

  async load() {
    try {
      const detail = await api(this.base());
      this.applyDetail(detail);
    } catch (err) {
      fill(this.el.error, String(err.message || err));
      this.el.error.hidden = false;
      if (err.status === 404) return;
    }
    if (this.selected) this.fetchTrajectory();
    followEvents(`${this.base()}/events`, {
      signal: this.abort.signal,
      onEvent: (ev) => this.onEvent(ev),
      onState: (state, detail) => {
        this.live = state;
        if (state === 'gone' && detail) {
          fill(this.el.error, detail.message);
          this.el.error.hidden = false;
        }
        this.schedule();
      },
      isOver: async () => {
        const detail = await api(this.base());
        this.applyDetail(detail);
        return TERMINAL.has(detail.run.status);
      },
    });
  }

  /** The result (rationale, error, summaries) once the store has it: the
   * run's row may be settled a moment after its `run_finished` event. */
  async fetchFinalDetail() {
    for (let attempt = 0; attempt < FINAL_DETAIL_TRIES && !this.abort.signal.aborted; attempt += 1) {
      try {
        const detail = await api(this.base());
        this.applyDetail(detail);
        if (TERMINAL.has(detail.run.status)) return;
      } catch {
        // try again below
      }
      await new Promise((resolve) => setTimeout(resolve, FINAL_DETAIL_DELAY_MS));
    }
  }

  applyDetail(detail) {
    const settled = this.info && TERMINAL.has(this.info.status);
    // Never step back from what run_finished said to an older stored row.
    if (!settled || TERMINAL.has(detail.run.status)) this.info = detail.run;
    this.request = detail.request;
    this.result = detail.result;
    for (const r of detail.rollouts) {
      const known = this.rolloutState(r.rollout_id);
      known.steps = Math.max(known.steps, r.steps);
      if (r.status !== 'running' || known.status === 'pending') known.status = r.status;
      if (r.answer !== null && r.answer !== undefined) known.answer = r.answer;
      if (r.error) known.error = r.error;
      if (tokensOf(r.cost) || r.cost.usd) known.cost = r.cost;
    }
    if (detail.result) {
      for (const summary of detail.result.summaries) this.summaries.set(summary.rollout_id, summary);
    }
    this.el.error.hidden = true;
    this.schedule();
  }

  rolloutState(rid) {
    let r = this.rollouts.get(rid);
    if (!r) {
      r = { rolloutId: rid, status: 'pending', steps: 0, tools: new Set(), answer: null, cost: null, parent: null, tokens: new Map(), error: null, live: '', liveStep: -1 };
      this.rollouts.set(rid, r);
    }
    return r;
  }

  onEvent(ev) {
    if (this.startTs === null || (ev.ts && ev.ts < this.startTs)) this.startTs = ev.ts || null;
    switch (ev.type) {
      case 'run_started':
        this.startTs = ev.ts;
        if (this.info && this.info.status === 'pending') this.info = { ...this.info, status: 'running' };
        break;
      case 'rollout_queued':
        this.rolloutState(ev.rollout_id).status = 'queued';
        break;
      case 'rollout_restarted': {
        const r = this.rolloutState(ev.rollout_id);
        r.status = 'running';
        this.notes.push({ kind: 'error', text: `restarted (incarnation ${ev.incarnation}) from ${ev.resumed_steps} committed steps after ${ev.error}`, rollout: ev.rollout_id });
        break;
      }
      case 'rollout_started': {
        const r = this.rolloutState(ev.rollout_id);
        if (r.status === 'pending' || r.status === 'queued') r.status = 'running';
        r.parent = ev.parent_rollout_id;
        if (this.info && this.info.status === 'pending') this.info = { ...this.info, status: 'running' };
        break;
      }
      case 'step': {
        const r = this.rolloutState(ev.rollout_id);
        if (r.status === 'pending') r.status = 'running';
        r.steps = Math.max(r.steps, ev.step.index + 1);
        if (ev.step.index >= r.liveStep) r.live = '';
        const usage = ev.step.reply ? ev.step.reply.usage : null;
        if (usage) {
          const tokens = usage.prompt_tokens + usage.completion_tokens;
          r.tokens.set(ev.step.index, tokens);
          this.stepTokens.set(`${ev.rollout_id}#${ev.step.index}`, { ts: ev.ts, tokens });
        }
        for (const r of ev.step.tool_results) {
          // Keyed: a follower that reconnects is sent stored events again.
          if (r.for_user) this.forUser.set(`${ev.rollout_id}#${ev.step.index}#${r.call_id}`, { rollout: ev.rollout_id, step: ev.step.index, tool: r.name, text: r.for_user });
        }
        if (ev.rollout_id === this.selected) this.refreshTrajectorySoon();
        break;
      }
      case 'token': {
        const r = this.rolloutState(ev.rollout_id);
        if (ev.step < r.steps) break; // a step already recorded (a late follower's backlog)
        if (ev.step !== r.liveStep) {
          r.liveStep = ev.step;
          r.live = '';
        }
        r.live = (r.live + (ev.text || ev.reasoning || '')).slice(-LIVE_TEXT_CHARS);
        if (r.status === 'pending' || r.status === 'queued') r.status = 'running';
        break;
      }
      case 'tool_call':
        this.rolloutState(ev.rollout_id).tools.add(ev.call_id);
        this.questions.callEnded(ev);
        break;
      case 'elicitation':
        this.questions.asked(ev);
        break;
      case 'rollout_finished': {
        const r = this.rolloutState(ev.rollout_id);
        r.status = ev.status;
        r.answer = ev.answer;
        r.cost = ev.cost;
        r.live = '';
        r.error = ev.answer === null && ev.status !== 'finished' ? ev.stop_reason || ev.status : null;
        if (ev.rollout_id === this.selected) this.refreshTrajectorySoon();
        break;
      }
      case 'summary':
        this.summaries.set(ev.summary.rollout_id, ev.summary);
        if (ev.summary.rollout_id === this.selected) this.trajectoryDirty = true;
        break;
      case 'vote':
        this.votes.push(ev);
        break;
      case 'budget':
        this.budget.push(ev);
        break;
      case 'signal':
        this.notes.push({ kind: 'signal', text: `${ev.signal} at step ${ev.step}${ev.detail ? `: ${ev.detail}` : ''}`, rollout: ev.rollout_id });
        break;
      case 'error':
        this.notes.push({ kind: ev.fatal ? 'fatal' : 'error', text: `${ev.where}: ${ev.message}`, rollout: ev.rollout_id });
        break;
      case 'run_finished':
        this.stopped = ev.stopped || null;
        if (this.info) {
          this.info = { ...this.info, status: ev.status, answer: ev.answer, cost: ev.cost };
        }
        this.questions.runEnded();
        this.fetchFinalDetail();
        if (this.selected) this.refreshTrajectorySoon();
        break;
      default:
        break;
    }
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  label(rid) {
    return rid.startsWith(`${this.runId}-`) ? rid.slice(this.runId.length + 1) : rid;
  }

  render() {
    this.renderHeader();
    this.renderRollouts();
    this.renderLiveText();
    const scaling = this.request ? this.request.scaling : { aggregate: '' };
    fill(this.el.aggregation, voteView(this.votes, { label: (r) => this.label(r), aggregate: scaling.aggregate, runId: this.runId }));
    fill(this.el.budget, budgetChart(this.budgetPoints(), this.stepPoints(), this.request ? this.request.budget : {}));
    fill(
      this.el.notes,
      this.notes.length
        ? this.notes.map((n) => h('li', { class: n.kind, testid: 'run-note' }, n.rollout ? `[${this.label(n.rollout)}] ` : '', n.text))
        : h('li', { class: 'muted' }, 'None.'),
    );
    this.renderForUser();
    this.renderTrajectory();
  }

  renderHeader() {
    const info = this.info;
    fill(this.el.status, info ? badge(info.status, 'run-status') : '');
    this.el.live.textContent = this.live;
    this.el.live.dataset.state = this.live;
    this.el.cancel.hidden = !info || TERMINAL.has(info.status);
    if (!info) return;
    const row = (label, value, testid) => (value === null || value === undefined || value === '' ? null : [h('dt', {}, label), h('dd', { testid }, value)]);
    const req = this.request;
    const budget = req ? Object.entries(req.budget).filter(([, v]) => v !== null).map(([k, v]) => `${k}=${v}`).join(', ') : '';
    const options = req && Object.keys(req.scaling.options).length ? ` ${JSON.stringify(req.scaling.options)}` : '';
    fill(
      this.el.facts,
      row('Agent', info.agent, 'run-agent'),
      row('Task', info.task, 'run-task'),
      row('Scaling', `${info.rollouts} rollout${info.rollouts === 1 ? '' : 's'} × ${info.aggregate}${options}`, 'run-scaling'),
      row('Budget', budget || 'uncapped', 'run-budget'),
      row('Cost', this.costText(info), 'run-cost'),
      row('Answer', info.answer, 'run-answer'),
      row('Why', this.result ? this.result.rationale : null, 'run-rationale'),
      row('Cut short', cutText(this.stopped || (this.result && this.result.stopped)), 'run-stopped'),
      row('Error', info.error, 'run-error'),
      info.resumed ? row('Resumed', `${info.resumed}×`, 'run-resumed') : null,
    );
  }

  /** The run's cost: the ledger's once it says something, else (live) the
   * tokens of the steps seen so far: the ledger reports as rollouts end. */
  costText(info) {
    const ledger = tokensOf(info.cost);
    if (TERMINAL.has(info.status)) return fmtCost(info.cost);
    let steps = 0;
    for (const st of this.stepTokens.values()) steps += st.tokens;
    if (steps <= ledger) return fmtCost(info.cost);
    const calls = this.stepTokens.size;
    return `${fmtTokens(steps)} tok · ${calls} call${calls === 1 ? '' : 's'} so far`;
  }

  /** What the run's tools meant for the person (shown, never sent to the
   * model), in the order the steps arrived. */
  renderForUser() {
    this.el.forUserPanel.hidden = this.forUser.size === 0;
    fill(
      this.el.forUser,
      [...this.forUser.values()].map((n) =>
        h(
          'li',
          { testid: 'for-user-note', dataset: { rolloutId: n.rollout, step: n.step } },
          h('div', { class: 'muted' }, `${this.label(n.rollout)} · step ${n.step} · ${n.tool}`),
          h('pre', { testid: 'for-user-text' }, clip(n.text, FOR_USER_CHARS)),
        ),
      ),
    );
  }

  renderLiveText() {
    const live = [...this.rollouts.values()].filter((r) => r.live && !TERMINAL_ROLLOUT.has(r.status));
    fill(
      this.el.liveText,
      live.length
        ? live.map((r) =>
            h(
              'div',
              { class: 'live-text', testid: 'live-text', dataset: { rolloutId: r.rolloutId, step: r.liveStep } },
              h('div', { class: 'muted' }, `${this.label(r.rolloutId)} · step ${r.liveStep}`),
              h('pre', {}, r.live),
            ),
          )
        : h('p', { class: 'muted' }, TERMINAL.has(this.info ? this.info.status : '') ? 'Done.' : 'Nothing being generated now.'),
    );
  }

  renderRollouts() {
    const rows = [...this.rollouts.values()].map((r) => {
      const liveTokens = [...r.tokens.values()].reduce((a, b) => a + b, 0);
      const cost = r.cost ? fmtCost(r.cost) : liveTokens ? `${fmtTokens(liveTokens)} tok` : '';
      return h(
        'tr',
        {
          testid: 'rollout-row',
          class: `clickable${r.rolloutId === this.selected ? ' selected' : ''}`,
          dataset: { rolloutId: r.rolloutId, status: r.status, steps: r.steps },
          onclick: () => {
            location.hash = `#/runs/${encodeURIComponent(this.runId)}/rollouts/${encodeURIComponent(r.rolloutId)}`;
          },
        },
        h('td', { title: r.rolloutId }, this.label(r.rolloutId), r.parent ? h('span', { class: 'muted' }, ` ← ${this.label(r.parent)}`) : null),
        h('td', {}, badge(r.status, 'rollout-status')),
        h('td', { testid: 'rollout-steps' }, String(r.steps)),
        h('td', {}, String(r.tools.size)),
        h(
          'td',
          { testid: 'rollout-answer', title: r.answer || r.error || '' },
          r.answer !== null || !r.error ? clip(r.answer, 60) : h('span', { class: 'error', testid: 'rollout-error' }, clip(r.error, 120)),
        ),
        h('td', {}, cost),
      );
    });
    fill(this.el.rollouts, rows.length ? rows : h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No rollouts yet.')));
  }

  t0() {
    return this.startTs || (this.budget.length ? this.budget[0].ts : 0);
  }

  /** Cumulative tokens of the steps' model calls, as the steps arrive. */
  stepPoints() {
    const t0 = this.t0();
    const steps = [...this.stepTokens.values()].sort((a, b) => a.ts - b.ts);
    let total = 0;
    const points = steps.map((st) => {
      total += st.tokens;
      return { t: Math.max(0, st.ts - t0), tokens: total };
    });
    if (points.length && points[0].t > 0) points.unshift({ t: 0, tokens: 0 });
    return points;
  }

  budgetPoints() {
    const t0 = this.t0();
    const points = this.budget.map((b) => ({
      t: Math.max(0, b.ts - t0),
      tokens: tokensOf(b.spent),
      usd: b.spent.usd || 0,
      leftTokens: b.left_tokens,
      leftUsd: b.left_usd,
    }));
    if (points.length && points[0].t > 0) points.unshift({ t: 0, tokens: 0, usd: 0 });
    return points;
  }

  // -- the selected rollout -------------------------------------------------

  select(rolloutId) {
    this.selected = rolloutId || null;
    this.trajectory = null;
    this.trajectoryError = null;
    this.trajectoryDirty = true;
    if (this.selected) this.fetchTrajectory();
    this.render();
  }

  refreshTrajectorySoon() {
    if (this.trajectoryTimer) return;
    this.trajectoryTimer = setTimeout(() => {
      this.trajectoryTimer = null;
      this.fetchTrajectory();
    }, TRAJECTORY_REFRESH_MS);
  }

  async fetchTrajectory() {
    const rid = this.selected;
    if (!rid) return;
    try {
      const traj = await api(`${this.base()}/rollouts/${encodeURIComponent(rid)}`);
      if (rid !== this.selected) return;
      this.trajectory = traj;
      this.trajectoryError = null;
      if (!this.summaries.has(rid) && traj.status !== 'running') {
        const all = await api(`${this.base()}/summaries`);
        for (const summary of all) this.summaries.set(summary.rollout_id, summary);
      }
    } catch (err) {
      if (rid !== this.selected) return;
      this.trajectoryError = err.status === 404 ? 'No steps recorded yet.' : String(err.message || err);
    }
    this.trajectoryDirty = true;
    this.schedule();
  }

  renderTrajectory() {
    if (!this.trajectoryDirty && this.el.trajectory.dataset.for === String(this.selected)) return;
    this.trajectoryDirty = false;
    this.el.trajectory.dataset.for = String(this.selected);
    if (!this.selected) {
      fill(this.el.trajectory, h('p', { class: 'muted' }, 'Click a rollout to see its steps and summary.'));
      return;
    }
    fill(
      this.el.trajectory,
      trajectoryView({
        rolloutId: this.selected,
        label: this.label(this.selected),
        trajectory: this.trajectory,
        error: this.trajectoryError,
        summary: this.summaries.get(this.selected) || null,
      }),
    );
  }

  async cancel() {
    this.el.cancel.disabled = true;
    try {
      this.info = await api(`${this.base()}/cancel`, { method: 'POST' });
    } catch (err) {
      fill(this.el.error, String(err.message || err));
      this.el.error.hidden = false;
    } finally {
      this.el.cancel.disabled = false;
    }
    this.schedule();
  }
}

/** How a budget cap cut the run short (`BudgetCut.describe`), or null. */
function cutText(cut) {
  if (!cut) return null;
  let text = `by ${cut.limit}: ${cut.finished} of ${cut.rollouts} rollouts finished`;
  if (cut.cut) text += ` (${cut.cut} stopped by the cap)`;
  if (cut.aggregation) text += ', and the aggregation was stopped before it decided';
  return text;
}
