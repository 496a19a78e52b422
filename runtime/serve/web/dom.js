// DOM building and formatting helpers shared by the page's views.
// Elements are built with `h` (never innerHTML): run tasks, answers and tool
// output are user or model text and must not be parsed as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function assign(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'testid') {
      el.setAttribute('data-testid', value);
    } else if (key === 'dataset') {
      for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v);
    } else if (key === 'value' && 'value' in el) {
      el.value = value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h('td', {testid: 'x', class: 'y'}, 'text', otherNode). */
export function h(tag, attrs, ...children) {
  return append(assign(document.createElement(tag), attrs), children);
}

/** An SVG element, same calling convention as `h`. */
export function s(tag, attrs, ...children) {
  return append(assign(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Replace every child of `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function tokensOf(cost) {
  const usage = (cost && cost.usage) || {};
  return (usage.prompt_tokens || 0) + (usage.completion_tokens || 0);
}

export function fmtTokens(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function fmtUsd(usd) {
  if (!usd) return '$0';
  return usd >= 0.01 ? `$${usd.toFixed(2)}` : `$${usd.toPrecision(2)}`;
}

/** "$0.0012 · 1,234 tok · 3 calls" for a Cost record. */
export function fmtCost(cost) {
  if (!cost) return '';
  // Without prices the daemon reports $0: show money only when there is some.
  const parts = cost.usd ? [fmtUsd(cost.usd)] : [];
  parts.push(`${fmtTokens(tokensOf(cost))} tok`);
  if (cost.model_calls) parts.push(`${cost.model_calls} call${cost.model_calls === 1 ? '' : 's'}`);
  return parts.join(' · ');
}

export function fmtAgo(ts) {
  if (!ts) return '';
  const secs = Math.max(0, Date.now() / 1000 - ts);
  if (secs < 60) return `${Math.round(secs)} s ago`;
  if (secs < 3600) return `${Math.round(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.round(secs / 3600)} h ago`;
  return new Date(ts * 1000).toLocaleString();
}

export function fmtSeconds(s) {
  if (s === null || s === undefined) return '';
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

export function clip(text, n) {
  if (text === null || text === undefined) return '';
  const str = String(text);
  return str.length > n ? `${str.slice(0, n - 1)}…` : str;
}

/** A status pill; the status is also in data-status for styling and tests. */
export function badge(status, testid) {
  return h('span', { class: `badge st-${status}`, testid, dataset: { status } }, status);
}

export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
