"""The HTML report's stylesheet and its one small script, inlined in every page.

The script only rearranges what the page already shows: with JavaScript off every table, plot
and panel is there (all panels one after another); with it on,

* every ``table.data`` sorts by a click on a header (numbers descending first, text ascending,
  by the full text where a cell shows it shortened; a second click reverses; empty cells last
  either way) and, from :data:`FILTER_ROWS` rows, gets
  a filter box that keeps the rows whose text or hover text holds what is typed;
* every ``div.panels`` (one ``div.panel`` per rank or step, ``data-name`` its label) gets a
  ``<select>`` that shows one panel at a time, the first one first.

No library, no network: about 4 KB of hand-written JavaScript.
"""

FILTER_ROWS = 6

CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --bg: #ffffff; --muted: #59636e; --line: #d1d9e0; --box: #f6f8fa; --warn: #9a6700; --hi: #fff8c5; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9198a1; --line: #3d444d; --box: #151b23; --warn: #d29922; --hi: #3b2e00; }
}
body { font: 14px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg);
       max-width: 1180px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.headline { background: var(--box); border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; font-size: 15px; }
.headline .title { margin: 0 0 4px; font-size: 16px; } .headline .tag { color: var(--muted); font-size: 12.5px; text-transform: uppercase; letter-spacing: .04em; }
.kpis { display: flex; flex-wrap: wrap; gap: 8px 24px; margin-top: 8px; font-size: 13px; color: var(--muted); }
.kpis b { color: var(--fg); font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 12.5px; font-variant-numeric: tabular-nums; max-width: 100%; }
th, td { border: 1px solid var(--line); padding: 3px 8px; }
th { background: var(--box); text-align: left; }
th button { all: unset; cursor: pointer; } th button:focus-visible { outline: 2px solid var(--muted); }
th[aria-sort=ascending] button::after { content: " \\25B2"; font-size: 9px; }
th[aria-sort=descending] button::after { content: " \\25BC"; font-size: 9px; }
td.n { text-align: right; white-space: nowrap; }
td { vertical-align: top; overflow-wrap: break-word; }
td.w code { overflow-wrap: anywhere; }  /* a long name, path or hash: breaks anywhere rather than widen its table */
td.i1 { padding-left: 24px; } td.i2 { padding-left: 44px; } td.i3 { padding-left: 64px; }
td[title] code { text-decoration: underline dotted var(--muted); cursor: help; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
pre { background: var(--box); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; white-space: pre-wrap; word-break: break-all; }
svg.plot { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; }
svg.plot rect:hover, svg.plot g:hover > * { opacity: 0.8; }
.note { color: var(--muted); font-size: 12.5px; }
ul.warnings li { color: var(--warn); }
.scroll { overflow-x: auto; }  /* last resort only: long cells wrap, long names are shortened */
.tools { font-size: 12.5px; color: var(--muted); margin: 8px 0 0; display: flex; gap: 12px; align-items: center; }
.tools input, .tools select { font: inherit; color: var(--fg); background: var(--bg); border: 1px solid var(--line); border-radius: 4px; padding: 2px 6px; }
.panel-name { font-weight: 600; margin: 12px 0 0; }
.js .panel:not(.on) { display: none; }
.js .panel-name { display: none; }
@media print { .js .panel { display: block !important; } .js .panel-name { display: block; } .tools { display: none; } }
"""

SCRIPT = r"""
(function () {
  'use strict';
  var doc = document;
  doc.documentElement.classList.add('js');
  function el(tag, attrs, text) {
    var e = doc.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text) e.textContent = text;
    return e;
  }
  function key(td) {
    var t = td ? ((td.querySelector('code') && td.getAttribute('title')) || td.textContent).trim() : '';
    if (t === '' || t === '-' || t === '\u2013') return null;
    var s = t.replace(/^[\u2212\u2013]/, '-').replace(/[,%\s]/g, '');
    return /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(s) ? parseFloat(s) : t.toLowerCase();
  }
  function sortTable(table, col) {
    var th = table.tHead.rows[0].cells[col], body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (tr, i) { return {tr: tr, k: key(tr.cells[col]), i: i}; });
    var numeric = rows.every(function (r) { return r.k === null || typeof r.k === 'number'; });
    var cur = th.getAttribute('aria-sort');
    var dir = cur ? (cur === 'ascending' ? -1 : 1) : (numeric ? -1 : 1);
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
    rows.sort(function (a, b) {
      if (a.k === null || b.k === null) return (a.k === null) - (b.k === null) || a.i - b.i;
      var x = typeof a.k === typeof b.k ? (a.k < b.k ? -1 : a.k > b.k ? 1 : 0) : (typeof a.k === 'number' ? -1 : 1);
      return x * dir || a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.tr); });
  }
  function filterTable(table, input, count) {
    var q = input.value.trim().toLowerCase(), n = 0, rows = table.tBodies[0].rows;
    Array.prototype.forEach.call(rows, function (tr) {
      var hay = tr.textContent;
      tr.querySelectorAll('[title]').forEach(function (c) { hay += ' ' + c.getAttribute('title'); });
      var show = !q || hay.toLowerCase().indexOf(q) >= 0;
      tr.hidden = !show;
      n += show;
    });
    count.textContent = q ? n + ' of ' + rows.length + ' rows' : rows.length + ' rows';
  }
  doc.querySelectorAll('table.data').forEach(function (table) {
    if (!table.tHead || !table.tBodies.length) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      var b = el('button', {type: 'button', title: 'sort by ' + th.textContent}, th.textContent);
      th.textContent = '';
      th.appendChild(b);
      b.addEventListener('click', function () { sortTable(table, col); });
    });
    if (table.tBodies[0].rows.length >= __FILTER_ROWS__) {
      var bar = el('div', {'class': 'tools'}), input = el('input', {type: 'search', placeholder: 'filter rows', 'aria-label': 'filter the rows of ' + table.id});
      var count = el('span', {'class': 'count'});
      bar.appendChild(input);
      bar.appendChild(count);
      var at = table.parentNode.classList.contains('scroll') ? table.parentNode : table;
      at.parentNode.insertBefore(bar, at);
      input.addEventListener('input', function () { filterTable(table, input, count); });
      filterTable(table, input, count);
    }
  });
  doc.querySelectorAll('div.panels').forEach(function (group) {
    var panels = Array.prototype.filter.call(group.children, function (c) { return c.classList.contains('panel'); });
    if (panels.length < 2) { panels.forEach(function (p) { p.classList.add('on'); }); return; }
    var bar = el('div', {'class': 'tools'}), label = el('label', {}, (group.getAttribute('data-label') || 'show') + ' ');
    var select = el('select', {'aria-label': group.getAttribute('data-label') || 'show'});
    panels.forEach(function (p, i) { select.appendChild(el('option', {value: p.getAttribute('data-key') || String(i)}, p.getAttribute('data-name'))); });
    label.appendChild(select);
    bar.appendChild(label);
    group.insertBefore(bar, group.firstChild);
    function show() { panels.forEach(function (p, i) { p.classList.toggle('on', i === select.selectedIndex); }); }
    select.addEventListener('change', show);
    show();
  });
})();
""".replace("__FILTER_ROWS__", str(FILTER_ROWS))
