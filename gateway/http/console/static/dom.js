// Building the DOM from data without innerHTML: every value becomes a text node, so a
// topic, client id or message body can never run as markup (the page's only defence
// against stored XSS that does not depend on the Content-Security-Policy alone).

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (value === true) node.setAttribute(key, '');
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n) {
  if (n === undefined || n === null) return '';
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return `${i ? v.toFixed(1) : v} ${UNITS[i]}`;
}

export function number(n, digits = 0) {
  if (n === undefined || n === null || n === '') return '';
  return Number(n).toLocaleString('en', { maximumFractionDigits: digits });
}

export function duration(seconds) {
  if (seconds === undefined || seconds === null) return '';
  let s = Math.floor(Number(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const mm = Math.floor(s / 60); s -= mm * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${mm}m`;
  if (mm) return `${mm}m ${s}s`;
  return `${s}s`;
}

export function time(ms) {
  if (!ms) return '';
  return new Date(Number(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// Calls fn at most once per `wait` ms after the last call (filter inputs).
export function debounce(fn, wait) {
  let timer = 0;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), wait);
  };
}
