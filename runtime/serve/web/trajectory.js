// One rollout in full: its steps (what the model said, the tools it called
// and what they returned, apart from what they meant for the person only,
// which model the router picked and how long it took)
// and its structured summary.

import { h, badge, fmtCost, fmtSeconds, tokensOf, clip } from './dom.js';

const TEXT_LIMIT = 4000;
const CONTEXT_LIMIT = 600;

function textOf(content) {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join('');
  }
  return JSON.stringify(content);
}

function stepView(step) {
  const choice = step.reply && step.reply.choices.length ? step.reply.choices[0] : null;
  const message = choice ? choice.message : null;
  const head = [`#${step.index}`];
  if (step.routing) head.push(step.routing.tier ? `${step.routing.model} (${step.routing.tier})` : step.routing.model);
  if (step.duration_s) head.push(fmtSeconds(step.duration_s));
  if (step.reply) head.push(`${tokensOf({ usage: step.reply.usage })} tok`);
  if (choice && choice.finish_reason) head.push(choice.finish_reason);
  const calls = message ? message.tool_calls || [] : [];
  return h(
    'li',
    { class: 'step', testid: 'step', dataset: { index: step.index } },
    h('div', { class: 'step-head' }, head.join(' · ')),
    step.routing && step.routing.reason ? h('div', { class: 'muted' }, `routing: ${step.routing.policy}: ${step.routing.reason}`) : null,
    message && message.reasoning_content
      ? h('details', {}, h('summary', {}, 'reasoning'), h('pre', {}, clip(message.reasoning_content, TEXT_LIMIT)))
      : null,
    message && message.content ? h('pre', { class: 'content', testid: 'step-content' }, clip(message.content, TEXT_LIMIT)) : null,
    calls.length
      ? h(
          'ul',
          { class: 'calls' },
          calls.map((c) => h('li', { testid: 'step-tool-call' }, h('code', {}, `${c.function.name}(${clip(c.function.arguments, 300)})`))),
        )
      : null,
    step.tool_results.length
      ? h(
          'ul',
          { class: 'results' },
          step.tool_results.map((r) =>
            h(
              'li',
              { class: r.is_error ? 'error' : '', testid: 'step-tool-result' },
              h('span', {}, `${r.name} → ${fmtSeconds(r.duration_s)}${r.is_error ? ' (error)' : ''}`),
              h('pre', {}, clip(r.content, TEXT_LIMIT)),
              r.for_user
                ? h('div', { class: 'for-user', testid: 'step-for-user' }, h('span', { class: 'muted' }, 'for you (not sent to the model)'), h('pre', {}, clip(r.for_user, TEXT_LIMIT)))
                : null,
            ),
          ),
        )
      : null,
    step.error ? h('div', { class: 'error' }, step.error) : null,
    h(
      'details',
      { class: 'context' },
      h('summary', {}, `context: ${step.messages.length} message${step.messages.length === 1 ? '' : 's'}`),
      h(
        'ol',
        {},
        step.messages.map((m) =>
          h('li', {}, h('b', {}, m.role), ' ', clip(textOf(m.content) || (m.tool_calls || []).map((c) => c.function.name).join(', '), CONTEXT_LIMIT)),
        ),
      ),
    ),
  );
}

function list(title, items, render = (x) => x) {
  if (!items || !items.length) return null;
  return h('div', {}, h('h5', {}, title), h('ul', {}, items.map((item) => h('li', {}, render(item)))));
}

function summaryView(summary) {
  if (!summary) return h('div', { class: 'summary muted', testid: 'summary-missing' }, 'No summary yet (written when the rollout finishes).');
  return h(
    'div',
    { class: 'summary', testid: 'summary' },
    h('h4', {}, 'Summary'),
    h('p', {}, h('b', {}, 'Answer: '), h('span', { testid: 'summary-answer' }, summary.answer === null ? '(none)' : summary.answer)),
    list('Facts', summary.facts, (f) => [
      f.verified ? '✓ ' : '',
      f.claim,
      f.evidence ? h('span', { class: 'muted' }, ` — ${clip(f.evidence, 300)}`) : null,
      f.source_step !== null && f.source_step !== undefined ? h('span', { class: 'muted' }, ` (step ${f.source_step})`) : null,
    ]),
    list('Conclusions', summary.conclusions),
    list('Sources', summary.sources),
    list('Uncertainties', summary.uncertainties),
    list('Hypotheses tried', summary.hypotheses),
    list('Progress', summary.progress),
    list('Failure modes', summary.failure_modes),
    h('p', { class: 'muted' }, fmtCost(summary.cost)),
  );
}

/** The trajectory panel for one rollout (trajectory may still be loading). */
export function trajectoryView({ rolloutId, label, trajectory, error, summary }) {
  const t = trajectory;
  const facts = [];
  const fact = (k, v, testid) => {
    if (v !== null && v !== undefined && v !== '') facts.push(h('dt', {}, k), h('dd', { testid }, v));
  };
  if (t) {
    fact('Stop reason', t.stop_reason, 'trajectory-stop');
    fact('Answer', t.answer, 'trajectory-answer');
    fact('Cost', fmtCost(t.cost));
    if (t.parent_rollout_id) {
      fact('Branched from', `${t.parent_rollout_id}${t.branch_step !== null ? ` at step ${t.branch_step}` : ''}`);
    }
  }
  return h(
    'div',
    {
      class: 'trajectory',
      testid: 'trajectory',
      dataset: { rolloutId, status: t ? t.status : 'loading', steps: t ? t.steps.length : 0 },
    },
    h('div', { class: 'panel-head' }, h('h3', {}, `Rollout ${label}`), t ? badge(t.status, 'trajectory-status') : null),
    error ? h('p', { class: 'muted', testid: 'trajectory-error' }, error) : null,
    !t && !error ? h('p', { class: 'muted' }, 'Loading…') : null,
    facts.length ? h('dl', { class: 'facts' }, facts) : null,
    t ? h('ol', { class: 'steps', testid: 'steps' }, t.steps.map(stepView)) : null,
    summaryView(summary),
  );
}
