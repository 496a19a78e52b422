// The MCP servers waiting for a person to approve agentrt's access (OAuth),
// from GET /v1/mcp/authorizations, polled: each with its authorization URL
// as a link; an entry goes once its server connects (or its wait expires).
// The URLs come from authorization servers: a link only when http(s).

import { api } from './api.js';
import { h, fill } from './dom.js';
import { webUrl, outLink } from './elicit.js';

const POLL_MS = 3000;

export class AuthorizationsPanel {
  constructor(el) {
    this.el = el;
    this.timer = null;
    this.paused = false;
    this.pending = [];
    this.fetchedAt = 0;
  }

  start() {
    this.refresh();
  }

  /** Poll again now (after a token was entered: a 401 pauses polling). */
  wake() {
    if (this.paused) this.refresh();
  }

  async refresh() {
    clearTimeout(this.timer);
    this.paused = false;
    try {
      const list = await api('/v1/mcp/authorizations');
      this.pending = list.pending;
      this.fetchedAt = Date.now() / 1000;
      this.render();
    } catch (err) {
      if (err.status === 401) {
        // The token bar asks for a token; polling resumes with wake().
        this.paused = true;
        return;
      }
      // Keep what was shown; try again at the next turn.
    }
    this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  render() {
    if (!this.pending.length) {
      this.el.hidden = true;
      this.el.replaceChildren();
      return;
    }
    const now = Date.now() / 1000;
    fill(
      this.el,
      h('h3', {}, 'MCP authorizations'),
      h('p', { class: 'muted' }, 'These MCP servers wait for you to approve agentrt\u2019s access. Open each link, approve, and the server connects.'),
      h(
        'ul',
        { class: 'authorizations' },
        this.pending.map((p) => {
          const href = webUrl(p.authorization_url);
          const left = p.ts ? Math.max(0, p.ts + p.expires_in_s - now) : p.expires_in_s;
          return h(
            'li',
            { testid: 'mcp-authorization', dataset: { server: String(p.server) } },
            h('strong', { testid: 'mcp-authorization-server' }, String(p.server)),
            h('span', { class: 'muted' }, ` · ${String(p.server_url)} · waits ${Math.ceil(left / 60)} min more`),
            h(
              'div',
              {},
              href
                ? outLink(href, 'Open the authorization page', 'mcp-authorization-link')
                : h('span', { class: 'error' }, 'Not a web address: ', h('code', {}, String(p.authorization_url))),
            ),
            h(
              'div',
              { class: 'muted small' },
              'It sends your browser back to ',
              h('code', {}, String(p.redirect_uri)),
              ' on the agentrt machine; from another machine, request the address it sent you to there (curl).',
            ),
          );
        }),
      ),
    );
    this.el.hidden = false;
  }
}
