// Pictures of a run: the budget burn over time (an inline SVG line chart of
// `budget` events) and the aggregation (tournament brackets, PDR selection
// rounds and vote tallies, from `vote` events).

import { h, s, fmtTokens, fmtUsd } from './dom.js';

const W = 640;
const H = 220;
const PAD = { left: 56, right: 64, top: 14, bottom: 30 };

function polyline(points, cls) {
  return s('polyline', { class: cls, points: points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ') });
}

/**
 * The budget burn chart.  `points` are the ledger's snapshots ({t, tokens,
 * usd, leftTokens, leftUsd}: cumulative spend, t in seconds since the run
 * started; they come as rollouts end); `steps` are the steps' own model-call
 * tokens ({t, tokens}, cumulative), which move with every step; `caps` holds
 * the request's max_tokens / max_usd (or null).
 */
export function budgetChart(points, steps, caps) {
  const box = h('div', {
    class: 'chart',
    testid: 'budget-chart',
    dataset: { points: points.length, stepPoints: steps.length },
  });
  if (!points.length && !steps.length) {
    box.append(h('p', { class: 'muted' }, 'No spend yet.'));
    return box;
  }
  const all = points.concat(steps);
  const last = points.length ? points[points.length - 1] : null;
  const tMax = Math.max(1, ...all.map((p) => p.t));
  const tokMax = Math.max(1, ...all.map((p) => p.tokens));
  const usdMax = Math.max(1e-9, ...points.map((p) => p.usd));
  const hasUsd = points.some((p) => p.usd > 0);
  const x = (t) => PAD.left + (t / tMax) * (W - PAD.left - PAD.right);
  const yTok = (v) => H - PAD.bottom - (v / (tokMax * 1.1)) * (H - PAD.top - PAD.bottom);
  const yUsd = (v) => H - PAD.bottom - (v / (usdMax * 1.1)) * (H - PAD.top - PAD.bottom);
  // Spend is cumulative and changes at the events: draw it as steps.
  const stepped = (series, y) => {
    const out = [];
    series.forEach((p, i) => {
      if (i > 0) out.push([x(p.t), y(series[i - 1])]);
      out.push([x(p.t), y(p)]);
    });
    out.push([x(tMax), y(series[series.length - 1])]);
    return out;
  };
  const svg = s(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'budget burn over time' },
    s('line', { class: 'axis', x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom }),
    s('line', { class: 'axis', x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom }),
    s('text', { class: 'tick', x: PAD.left - 6, y: H - PAD.bottom, 'text-anchor': 'end' }, '0'),
    s('text', { class: 'tick tok', x: PAD.left - 6, y: yTok(tokMax) + 4, 'text-anchor': 'end' }, fmtTokens(tokMax)),
    s('text', { class: 'tick', x: PAD.left, y: H - 8, 'text-anchor': 'start' }, '0 s'),
    s('text', { class: 'tick', x: W - PAD.right, y: H - 8, 'text-anchor': 'end' }, `${tMax.toFixed(1)} s`),
  );
  if (steps.length) svg.append(polyline(stepped(steps, (p) => yTok(p.tokens)), 'line steps'));
  if (points.length) {
    svg.append(
      polyline(stepped(points, (p) => yTok(p.tokens)), 'line tok'),
      ...points.map((p) =>
        s(
          'circle',
          { class: 'dot tok', cx: x(p.t), cy: yTok(p.tokens), r: 3 },
          s('title', {}, `${p.t.toFixed(1)} s: ${p.tokens} tokens, ${fmtUsd(p.usd)}`),
        ),
      ),
    );
  }
  if (hasUsd) {
    svg.append(
      s('line', { class: 'axis', x1: W - PAD.right, y1: PAD.top, x2: W - PAD.right, y2: H - PAD.bottom }),
      s('text', { class: 'tick usd', x: W - PAD.right + 6, y: yUsd(usdMax) + 4, 'text-anchor': 'start' }, fmtUsd(usdMax)),
      polyline(stepped(points, (p) => yUsd(p.usd)), 'line usd'),
    );
  }
  const capText = [];
  if (caps.max_tokens) capText.push(`cap ${fmtTokens(caps.max_tokens)} tokens`);
  if (caps.max_usd) capText.push(`cap ${fmtUsd(caps.max_usd)}`);
  const known = (v) => v !== null && v !== undefined;
  box.append(
    svg,
    h(
      'div',
      { class: 'legend' },
      last ? h('span', { class: 'key tok' }, `ledger: ${fmtTokens(last.tokens)} tokens`) : null,
      steps.length ? h('span', { class: 'key steps' }, `steps: ${fmtTokens(steps[steps.length - 1].tokens)} tokens`) : null,
      hasUsd ? h('span', { class: 'key usd' }, `spent ${fmtUsd(last.usd)}`) : null,
      last && known(last.leftTokens) ? h('span', { class: 'muted' }, `${fmtTokens(last.leftTokens)} tokens left`) : null,
      last && known(last.leftUsd) ? h('span', { class: 'muted' }, `${fmtUsd(last.leftUsd)} left`) : null,
      capText.length ? h('span', { class: 'muted' }, capText.join(', ')) : null,
    ),
  );
  return box;
}

/**
 * Split vote events into aggregation stages: a new stage starts when the
 * aggregator changes or the round number goes back down (a PDR run plays one
 * RTV bracket per distill round, then its final aggregator).
 */
export function voteStages(votes) {
  const stages = [];
  let stage = null;
  for (const vote of votes) {
    if (!stage || stage.aggregator !== vote.aggregator || vote.round < stage.lastRound) {
      stage = { aggregator: vote.aggregator, lastRound: vote.round, rounds: new Map() };
      stages.push(stage);
    }
    stage.lastRound = vote.round;
    if (!stage.rounds.has(vote.round)) stage.rounds.set(vote.round, []);
    stage.rounds.get(vote.round).push(vote);
  }
  return stages;
}

const STAGE_NAMES = {
  rtv: 'Tournament (RTV)',
  majority: 'Majority vote',
  weighted: 'Weighted vote',
  best_of_n: 'Best of N (judge)',
  compressed: 'Compressed vote',
  aggagent: 'Aggregation agent',
  pdr: 'Distill-refine (PDR)',
};

function matchBox(vote, label, runId) {
  const candidates = vote.candidates.map((rid) => {
    const won = rid === vote.winner;
    const count = vote.votes && rid in vote.votes ? vote.votes[rid] : null;
    return h(
      'li',
      { class: won ? 'winner' : '', dataset: { rolloutId: rid } },
      h('a', { href: `#/runs/${encodeURIComponent(runId)}/rollouts/${encodeURIComponent(rid)}` }, label(rid)),
      count !== null ? h('span', { class: 'count' }, String(count)) : null,
      won ? h('span', { class: 'mark' }, '✓') : null,
    );
  });
  // Say why a winner went through when no vote decided it: a bye, the same
  // answer on every side (nothing to judge), or no verdict the judge gave
  // could be read (every count 0: the tie rule chose); or why none did: the
  // budget cap stopped the judges first (no winner, all stay in).
  const counts = vote.votes ? Object.values(vote.votes) : [];
  let note = null;
  if (!vote.winner && vote.candidates.length > 1) note = 'budget cap: not decided';
  else if (vote.candidates.length === 1) note = 'bye';
  else if (!counts.length) note = 'same answer: not judged';
  else if (counts.every((c) => c === 0)) note = 'no verdict parsed: tie broken';
  return h(
    'div',
    { class: 'match', testid: 'vote-match', dataset: { winner: vote.winner || '' } },
    h('ul', {}, candidates),
    note ? h('div', { class: 'muted', testid: 'vote-note' }, note) : null,
  );
}

/** The aggregation panel's content; `label` shortens rollout ids. */
export function voteView(votes, { label, aggregate, runId }) {
  const box = h('div', { testid: 'aggregation', dataset: { votes: votes.length } });
  if (!votes.length) {
    box.append(h('p', { class: 'muted' }, 'No aggregation yet.'));
    return box;
  }
  const stages = voteStages(votes);
  const brackets = stages.filter((st) => st.aggregator === 'rtv').length;
  let bracketNo = 0;
  stages.forEach((stage, i) => {
    let title = STAGE_NAMES[stage.aggregator] || stage.aggregator;
    if (stage.aggregator === 'rtv') {
      bracketNo += 1;
      // PDR distills before rounds 2..R with one bracket each; its final
      // aggregator (the last stage) may be a bracket too.
      if (aggregate === 'pdr' && i < stages.length - 1) {
        title = `PDR round ${bracketNo + 1}: select the workspace (RTV)`;
      } else if (brackets > 1 && aggregate !== 'pdr') {
        title = `${title} #${bracketNo}`;
      }
    }
    if (aggregate === 'pdr' && stages.length > 1 && i === stages.length - 1) title = `Final: ${title}`;
    const rounds = [...stage.rounds.entries()].sort((a, b) => a[0] - b[0]);
    box.append(
      h(
        'div',
        { class: 'stage', testid: 'vote-stage', dataset: { aggregator: stage.aggregator } },
        h('h4', {}, title),
        h(
          'div',
          { class: 'bracket' },
          rounds.map(([round, matches]) =>
            h(
              'div',
              { class: 'round', testid: 'vote-round', dataset: { round } },
              h('div', { class: 'round-head' }, rounds.length > 1 ? `Round ${round}` : ''),
              matches.map((m) => matchBox(m, label, runId)),
            ),
          ),
        ),
      ),
    );
  });
  return box;
}
