// A time-series line chart in SVG, drawn from scratch each update (a few hundred
// points: cheaper than diffing). Series: [{name, points: [[tMs, value], ...], dash?}]. The
// legend shows each series' latest value (data-series / .value, which the browser tests
// read too).

import { h, clear } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b'];
const W = 600;
const H = 160;
const PAD = { left: 56, right: 8, top: 8, bottom: 20 };

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function clock(ms) {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

export class LineChart {
  // integer: the values are counts (axis ticks stay whole numbers)
  constructor(title, format = (v) => String(v), { integer = false } = {}) {
    this.format = format;
    this.integer = integer;
    this.svg = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
    this.legend = h('ul', { class: 'legend' });
    this.node = h('figure', { class: 'chart' }, h('figcaption', {}, title), this.svg, this.legend);
  }

  update(series) {
    clear(this.svg);
    clear(this.legend);
    const all = series.flatMap((s) => s.points);
    if (!all.length) {
      this.svg.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' },
        'collecting samples...'));
      return;
    }
    const t0 = Math.min(...all.map((p) => p[0]));
    const t1 = Math.max(t0 + 1, ...all.map((p) => p[0]));
    let vmax = niceMax(Math.max(...all.map((p) => p[1])));
    if (this.integer) vmax = Math.max(2, Math.ceil(vmax / 2) * 2);
    const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
    const y = (v) => H - PAD.bottom - (v / vmax) * (H - PAD.top - PAD.bottom);
    for (const frac of [0, 0.5, 1]) {
      const v = vmax * frac;
      this.svg.append(svg('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid' }));
      this.svg.append(svg('text', { x: PAD.left - 4, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' },
        this.format(v)));
    }
    this.svg.append(svg('text', { x: PAD.left, y: H - 4, class: 'axis' }, clock(t0)));
    this.svg.append(svg('text', { x: W - PAD.right, y: H - 4, 'text-anchor': 'end', class: 'axis' },
      clock(t1)));
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const d = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
      const line = { points: d, fill: 'none', stroke: color, 'stroke-width': s.dash ? 2.5 : 1.5 };
      if (s.dash) line['stroke-dasharray'] = '6 4'; // a total under the per-protocol lines
      this.svg.append(svg('polyline', line));
      if (s.points.length) { // the newest value as a dot (a lone first sample shows too)
        const [t, v] = s.points[s.points.length - 1];
        this.svg.append(svg('circle', { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, fill: color }));
      }
      const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
      const swatch = h('span', { class: 'swatch' });
      swatch.style.backgroundColor = color; // CSSOM: the CSP allows no style attribute
      this.legend.append(h('li', { dataset: { series: s.name } }, swatch, `${s.name} `,
        h('span', { class: 'value' }, this.format(last))));
    });
  }
}
