// Questions the person behind a run is asked (the run's `elicitation`
// events): a form built from the server's requested schema, a link to open
// (URL mode), or a tool call to allow (an MCP server's destructive tool, or a tool
// under `[approvals.TOOL]`); answered with POST
// /v1/runs/{id}/elicitations/{question_id}.  A question stops waiting when
// this page answers it, when the run's `elicitation_answered` event says how
// it ended (answered elsewhere, or timed out), when the tool call that asked
// is recorded (`tool_call`), when the run ends, or when the daemon says it no
// longer waits (404, 409).  Everything in a question is the asker's text:
// shown as text, and a URL becomes a link only when it is http(s).

import { api, ApiFailure } from './api.js';
import { h, fill } from './dom.js';

// What each answer is called, by the question's mode.
const SAID = {
  approval: { accept: 'Allowed', decline: 'Denied' },
  url: { accept: 'Done (you said you opened the link)' },
};
const OUTCOMES = {
  accept: 'Accepted',
  decline: 'Declined',
  cancel: 'Cancelled',
  gone: 'No longer waiting: answered elsewhere or timed out',
  ended: 'No longer waiting: the run ended',
};

/** `url` as a link target when it is a web address, else null. */
export function webUrl(url) {
  try {
    const parsed = new URL(String(url));
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed.href : null;
  } catch {
    return null;
  }
}

/** A link that opens in a new tab and gives the opened page no hold on this one. */
export function outLink(href, text, testid) {
  return h('a', { href, target: '_blank', rel: 'noopener noreferrer', testid }, text);
}

// ------------------------------------------------------------ schema -> form

/** The choices of an enum-like schema: [{value, label}], or null. */
function choicesOf(spec) {
  if (!spec || typeof spec !== 'object') return null;
  const titled = Array.isArray(spec.oneOf) ? spec.oneOf : Array.isArray(spec.anyOf) ? spec.anyOf : null;
  if (titled && titled.every((c) => c && typeof c === 'object' && 'const' in c)) {
    return titled.map((c) => ({ value: String(c.const), label: String(c.title ?? c.const) }));
  }
  if (Array.isArray(spec.enum)) {
    const names = Array.isArray(spec.enumNames) ? spec.enumNames : [];
    return spec.enum.map((v, i) => ({ value: String(v), label: String(names[i] ?? v) }));
  }
  return null;
}

const INPUT_TYPES = { email: 'email', uri: 'url', date: 'date' };

/**
 * One field of the form: {el, read()} where read() returns the value to
 * send, or undefined to leave the field out.  `check()` (optional) sets a
 * custom validity message before the form is validated.
 */
function fieldFor(name, spec, required) {
  const type = spec && typeof spec === 'object' ? spec.type : undefined;
  const hasDefault = spec && spec.default !== undefined && spec.default !== null;
  const label = String((spec && spec.title) || name);
  const described = spec && spec.description ? h('span', { class: 'muted field-help' }, String(spec.description)) : null;
  const head = h('span', { class: 'field-label' }, label, required ? h('span', { class: 'req', title: 'required' }, ' *') : null);
  const wrap = (kind, control, tag = 'label') => h(tag, { class: `field field-${kind}`, testid: 'mcp-field', dataset: { name, kind } }, head, control, described);

  if (type === 'boolean') {
    const box = h('input', { type: 'checkbox', name, checked: hasDefault && spec.default === true });
    return {
      el: h('label', { class: 'field field-boolean', testid: 'mcp-field', dataset: { name, kind: 'boolean' } }, h('span', { class: 'check' }, box, ' ', head), described),
      read: () => box.checked,
    };
  }

  if (type === 'array') {
    const options = choicesOf(spec.items) || [];
    const picked = new Set(hasDefault && Array.isArray(spec.default) ? spec.default.map(String) : []);
    const boxes = options.map((o) => h('input', { type: 'checkbox', name, value: o.value, checked: picked.has(o.value) }));
    const min = Number.isInteger(spec.minItems) ? spec.minItems : required ? 1 : 0;
    const max = Number.isInteger(spec.maxItems) ? spec.maxItems : Infinity;
    // Left empty, an optional field is left out (not sent as []).
    const check = () => {
      const n = boxes.filter((b) => b.checked).length;
      const skipped = n === 0 && !required;
      const bad = skipped ? '' : n < min ? `Choose at least ${min}.` : n > max ? `Choose at most ${max}.` : '';
      if (boxes.length) boxes[0].setCustomValidity(bad);
    };
    for (const b of boxes) b.addEventListener('change', check);
    const list = h('span', { class: 'choices' }, options.map((o, i) => h('label', { class: 'check' }, boxes[i], ' ', o.label)));
    return {
      el: wrap('multi', list, 'div'),
      check,
      read: () => {
        const picked = boxes.filter((b) => b.checked).map((b) => b.value);
        return picked.length || required ? picked : undefined;
      },
    };
  }

  const choices = choicesOf(spec);
  if (type === 'string' && choices) {
    const select = h(
      'select',
      { name, required },
      required && hasDefault ? null : h('option', { value: '' }, required ? 'choose…' : '—'),
      choices.map((c) => h('option', { value: c.value, selected: hasDefault && String(spec.default) === c.value }, c.label)),
    );
    return { el: wrap('choice', select), read: () => (select.value === '' ? undefined : select.value) };
  }

  if (type === 'number' || type === 'integer') {
    const input = h('input', {
      type: 'number',
      name,
      required,
      step: type === 'integer' ? 1 : 'any',
      min: Number.isFinite(spec.minimum) ? spec.minimum : null,
      max: Number.isFinite(spec.maximum) ? spec.maximum : null,
      value: hasDefault ? String(spec.default) : null,
    });
    return {
      el: wrap(type, input),
      read: () => {
        if (input.value.trim() === '') return undefined;
        return type === 'integer' ? Number.parseInt(input.value, 10) : Number.parseFloat(input.value);
      },
    };
  }

  if (type === 'string') {
    const format = spec.format ? String(spec.format) : '';
    const input = h('input', {
      type: INPUT_TYPES[format] || 'text',
      name,
      required,
      minlength: Number.isInteger(spec.minLength) ? spec.minLength : null,
      maxlength: Number.isInteger(spec.maxLength) ? spec.maxLength : null,
      placeholder: format === 'date-time' ? '2026-01-31T12:00:00Z' : null,
      value: hasDefault ? String(spec.default) : null,
      dataset: format ? { format } : null,
    });
    return { el: wrap('string', input), read: () => (input.value === '' ? undefined : input.value) };
  }

  // Not a kind MCP elicitation allows: it cannot be filled here.
  const note = h('span', { class: 'error' }, `cannot be filled here (type ${JSON.stringify(type)})`);
  const blocker = h('input', { type: 'hidden', name });
  return {
    el: wrap('unsupported', h('span', {}, note, blocker), 'div'),
    unsupported: required,
    read: () => undefined,
  };
}

/** The form's fields for a flat `requestedSchema`. */
function formFields(schema) {
  const props = schema && typeof schema === 'object' && schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
  const required = new Set(Array.isArray(schema && schema.required) ? schema.required.map(String) : []);
  return Object.entries(props).map(([name, spec]) => ({ name, ...fieldFor(name, spec, required.has(name)) }));
}

// ------------------------------------------------------------ one question

class Question {
  constructor(runId, ev, { label, onChange }) {
    this.runId = runId;
    this.onChange = onChange;
    this.ev = ev;
    this.id = ev.question_id;
    this.outcome = null; // a key of OUTCOMES once it no longer waits
    this.sending = false;
    this.over = null;
    this.error = h('div', { class: 'error', testid: 'mcp-error', hidden: true });
    this.outcomeEl = h('div', { class: 'outcome', testid: 'mcp-outcome', hidden: true });
    this.buttons = [];
    this.body = this.buildBody();
    // A tool under [approvals.TOOL] asks with no server.
    const where = ev.server
      ? [`from MCP server `, h('strong', { testid: 'mcp-server' }, String(ev.server))]
      : ['approval'];
    if (ev.tool) where.push(` · tool ${String(ev.tool)}`);
    if (ev.rollout_id) where.push(` · ${label(String(ev.rollout_id))}`);
    this.el = h(
      'div',
      { class: 'question', testid: 'mcp-question', dataset: { questionId: this.id, mode: String(ev.mode), state: 'waiting' } },
      h('div', { class: 'muted' }, where),
      h('p', { class: 'question-message', testid: 'mcp-message' }, String(ev.message || '')),
      this.body,
      this.error,
      this.outcomeEl,
    );
  }

  button(text, action, testid, { submit = false, plain = false } = {}) {
    const b = h('button', { type: submit ? 'submit' : 'button', class: plain ? 'plain' : null, testid }, text);
    if (!submit) b.addEventListener('click', () => this.answer(action));
    this.buttons.push(b);
    return b;
  }

  buildBody() {
    const ev = this.ev;
    if (ev.mode === 'url') {
      const href = webUrl(ev.url);
      let host = '';
      if (href) host = new URL(href).host;
      return h(
        'div',
        { class: 'question-body' },
        href
          ? h('p', {}, 'Open ', outLink(href, href, 'mcp-url'), h('span', { class: 'muted' }, ` (${host})`))
          : h('p', { class: 'error', testid: 'mcp-url-refused' }, 'Not a web address, so not offered as a link: ', h('code', {}, String(ev.url || ''))),
        h(
          'div',
          { class: 'actions' },
          href ? this.button("I've done it", 'accept', 'mcp-accept') : null,
          this.button('Decline', 'decline', 'mcp-decline', { plain: true }),
        ),
      );
    }
    if (ev.mode === 'approval') {
      return h(
        'div',
        { class: 'question-body' },
        h('div', { class: 'muted' }, `tool ${String(ev.tool || '')} with arguments`),
        h('pre', { testid: 'mcp-arguments' }, JSON.stringify(ev.arguments || {}, null, 2)),
        h(
          'div',
          { class: 'actions' },
          this.button('Allow', 'accept', 'mcp-accept'),
          this.button('Deny', 'decline', 'mcp-decline', { plain: true }),
        ),
      );
    }
    this.fields = formFields(ev.requested_schema);
    const blocked = this.fields.some((f) => f.unsupported);
    const form = h(
      'form',
      {
        class: 'question-form',
        testid: 'mcp-form',
        onsubmit: (e) => {
          e.preventDefault();
          this.answer('accept');
        },
      },
      this.fields.map((f) => f.el),
      h(
        'div',
        { class: 'actions' },
        blocked ? null : this.button('Accept', 'accept', 'mcp-accept', { submit: true }),
        this.button('Decline', 'decline', 'mcp-decline', { plain: true }),
        this.button('Cancel', 'cancel', 'mcp-cancel', { plain: true }),
      ),
    );
    this.form = form;
    return form;
  }

  content() {
    const out = Object.create(null); // a field named "__proto__" stays a field
    for (const f of this.fields || []) {
      const v = f.read();
      if (v !== undefined) out[f.name] = v;
    }
    return out;
  }

  async answer(action) {
    if (this.outcome) return;
    const body = { action };
    if (action === 'accept' && this.form) {
      for (const f of this.fields) if (f.check) f.check();
      if (!this.form.reportValidity()) return;
      body.content = this.content();
    }
    for (const b of this.buttons) b.disabled = true;
    this.error.hidden = true;
    this.sending = true;
    try {
      await api(`/v1/runs/${encodeURIComponent(this.runId)}/elicitations/${encodeURIComponent(this.id)}`, { method: 'POST', body });
      this.sending = false;
      this.settle(action);
    } catch (err) {
      this.sending = false;
      if ((err instanceof ApiFailure && (err.status === 404 || err.status === 409)) || this.over) {
        this.settle(this.over || 'gone');
        return;
      }
      fill(this.error, String(err.message || err));
      this.error.hidden = false;
      for (const b of this.buttons) b.disabled = false;
    }
  }

  /** Its call or its run ended (`why`: gone | ended); an answer being
   * sent decides the outcome when it comes back. */
  close(why) {
    this.over = this.over || why;
    if (!this.sending) this.settle(why);
  }

  /** It no longer waits: show how it ended instead of the controls. */
  settle(outcome) {
    if (this.outcome) return;
    this.outcome = outcome;
    this.el.dataset.state = outcome;
    this.body.hidden = true;
    this.error.hidden = true;
    const said = SAID[this.ev.mode] || {};
    fill(this.outcomeEl, said[outcome] || OUTCOMES[outcome] || outcome);
    this.outcomeEl.hidden = false;
    this.onChange();
  }
}

// ------------------------------------------------------------ the panel

/**
 * The run's questions, in the order asked.  Built once per question (typing
 * in a form survives the run view's re-renders); `el` is hidden until the
 * first question comes.
 */
export class QuestionsPanel {
  constructor(runId, { label }) {
    this.runId = runId;
    this.label = label;
    this.questions = new Map();
    this.list = h('div', { class: 'questions' });
    this.count = h('span', { class: 'muted', testid: 'mcp-waiting' });
    this.el = h(
      'div',
      { class: 'panel questions-panel', testid: 'mcp-questions', hidden: true },
      h('div', { class: 'panel-head' }, h('h3', {}, 'Questions for you'), this.count),
      this.list,
    );
  }

  /** An `elicitation` event (replayed ones too). */
  asked(ev) {
    if (!ev.question_id || this.questions.has(ev.question_id)) return;
    const q = new Question(this.runId, ev, { label: this.label, onChange: () => this.update() });
    this.questions.set(ev.question_id, q);
    this.list.append(q.el);
    this.el.hidden = false;
    this.update();
  }

  /** An `elicitation_answered` event: the question ended.  Answered here, it
   * shows this page's answer already; else it was answered elsewhere or
   * timed out. */
  answered(ev) {
    const q = this.questions.get(ev.question_id);
    if (q) q.close('gone');
    this.update();
  }

  /** A `tool_call` event: the call that asked is over, so is its question. */
  callEnded(ev) {
    for (const q of this.questions.values()) {
      if (!q.ev.call_id || q.ev.call_id !== ev.call_id) continue;
      if (q.ev.rollout_id && q.ev.rollout_id !== ev.rollout_id) continue;
      q.close('gone');
    }
    this.update();
  }

  /** The run is over: nothing waits any more. */
  runEnded() {
    for (const q of this.questions.values()) q.close('ended');
    this.update();
  }

  /** How many questions still wait for an answer. */
  waiting() {
    return [...this.questions.values()].filter((q) => !q.outcome && !q.over).length;
  }

  update() {
    const waiting = [...this.questions.values()].filter((q) => !q.outcome).length;
    this.count.textContent = waiting ? `${waiting} waiting for you` : 'none waiting';
    this.count.dataset.waiting = String(waiting);
  }
}
