// The step view on the client: a run's bundle (viz/step_bundle.py) is loaded once, then
// every scrub only swaps small panels and toggles classes in the graph's SVG.
window.cfsm = (() => {
  let B = null, root = null, L = -1, svg = null, vb = null, base = null, shift = [0, 0], chars = [];
  let chipEls = [], playing = null, moved = false, loaded = null, blobUrl = null, drag = null, passed = null, cur = -1;
  // the tour in progress ({stops, i, missing}); its chain stop's [step, edge ids], framed with the current state
  let tour = null, tourCentre = null;
  const zoomed = new WeakSet();
  // The graph's room: labels start at LABEL_PX on screen, "fit" never goes under FIT_PX;
  // the view is placed so that no label is cut at the panel's edge. Presentation mode
  // (static/present.js) draws them larger (`labels`).
  let LABEL_PX = 14, FIT_PX = 10; const PAD = 4;
  let boxes = null, focusBox = null, focusLabel = null, content = null, minFont = 10, blind = false, lastSize = [0, 0];
  const $ = (sel) => root && root.querySelector(sel);
  const union = (bs) => [0, 1, 2, 3].map((i) => (i < 2 ? Math.min : Math.max)(...bs.map((b) => b[i])));  // [x0, y0, x1, y1] boxes
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const FEW_ALLOWED = 16;  // at most this many allowed ids are ringed and listed under the mask
  // as viz.panels.share: one decimal near either end, so 99.7% stands beside 0.3%
  const pct = (p) => (p === null || p === undefined) ? "" : p <= 0 ? "0%" : p < 0.001 ? "<0.1%" :
    p >= 1 ? "100%" : p > 0.999 ? ">99.9%" : (100 * p).toFixed(p < 0.1 || p > 0.99 ? 1 : 0) + "%";

  function sliderValue() {
    const n = document.querySelector("#step-slider input[type=number]");
    return n ? Math.max(0, parseInt(n.value || "0", 10) || 0) : 0;
  }
  function attach() {
    const el = document.querySelector("#step-view");
    const data = el && el.querySelector("script.cfsm-bundle");
    // cheap: a text node's length, not textContent (a copy of a bundle of hundreds of KB)
    const key = el && (el.dataset.run || "") + (data && data.firstChild ? data.firstChild.length : "");
    if (!el || (el === root && key === loaded)) { mergeRest(); return; }
    if (el !== root) el.addEventListener("click", onClick);
    root = el; loaded = key;
    B = data ? JSON.parse(data.textContent) : null;
    L = -1; svg = null; if (!B) return;
    B.steps = rowsOf(B.steps);
    const note = $("#graph-note"); if (note) note.textContent = B.note;
    chars = Array.from(B.text);
    chipEls = Array.from(el.querySelectorAll("#token-strip .cfsm-chip[data-step]")).map((c) => [c, parseInt(c.dataset.step, 10)]);
    tour = null; passed = null; tourCentre = null;
    show(B.live ? 0 : sliderValue());  // a live view follows the run: its last step
    mergeRest();
    if (window.cfsmTourPending && B.n > 0 && !B.live) { window.cfsmTourPending = false; startTour(); }
  }
  // The steps come as columns, each field's name once (viz/bundle_shape.py declares them):
  // one object per position again, {caption, offset, element, ...}
  function rowsOf(cols) {
    const names = Object.keys(cols), n = names.length ? cols[names[0]].length : 0;
    return Array.from({length: n}, (_, k) => Object.fromEntries(names.map((f) => [f, cols[f][k]])));
  }
  // A finished run's view comes with what its first position draws; the other layouts and
  // masks come last, in a hidden host (viz.step_bundle.split_bundle), and are merged here.
  function mergeRest() {
    if (!B || !B.pending) return;
    const d = document.querySelector("#step-view-rest script.cfsm-bundle-rest");
    if (!d || d.dataset.run !== B.run) return;
    const R = JSON.parse(d.textContent);
    for (const [i, x] of Object.entries(R.layouts)) B.layouts[Number(i)] = x;
    Object.assign(B.masks, R.masks);
    for (const [name, col] of Object.entries(R.panels || {})) col.forEach((x, i) => { if (x !== null) B.panels[name][i] = x; });
    B.pending = false;
    if (root.querySelector(".cfsm-loading")) show(cur);  // a position that waited for them
    else showPanels(cur);
  }
  function setLayout(i) {
    const host = $("#fsm-graph");
    if (B.layouts[i] === null) {  // still on its way (mergeRest draws it)
      host.innerHTML = `<div class="cfsm-muted cfsm-loading" id="graph-loading">Drawing this part of the automaton \u2026</div>`;
      $("#graph-where").innerHTML = "";  // no state named beside a graph not drawn yet
      svg = null; L = -1;
      return;
    }
    host.innerHTML = B.layouts[i];
    svg = host.querySelector("svg");
    L = i;
    const v = svg.getAttribute("viewBox").split(/[ ,]+/).map(Number);
    base = v;
    const t = (svg.querySelector("g.graph") || svg).getAttribute("transform") || "";
    const m = /translate\(([-\d.]+)[ ,]+([-\d.]+)\)/.exec(t);
    shift = m ? [parseFloat(m[1]), parseFloat(m[2])] : [0, 0];
    svg.removeAttribute("width"); svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    minFont = Math.min(...Array.from(svg.querySelectorAll("text"), (t) => parseFloat(t.getAttribute("font-size")) || 14), 14);
    boxes = null; content = null; vb = [...base];
    panZoom(host);
    home();
  }
  // The labels' and states' boxes and the drawing's extent as the browser draws them (its
  // fonts are wider than Graphviz's estimate: a label may stick out of the viewBox Graphviz
  // wrote). Only a shown panel can be measured: a hidden one waits (`blind`) for the observer.
  function measure() {
    if (boxes) return true;
    if (!svg || !$("#fsm-graph").clientWidth) { blind = true; return false; }
    // the boxes drawn on screen, back in the viewBox's units: a fallback font's glyphs
    // (the visible space, the return) reach past the box getBBox gives
    const m = unitsAtLabelSize(), unit = (t) => { const r = t.getBoundingClientRect();
      return [m.a * r.left + m.e, m.d * r.top + m.f, m.a * r.right + m.e, m.d * r.bottom + m.f]; };
    // a state's circle is wider than its label: kept whole too, after every label
    const states = [...svg.querySelectorAll("g.node")].filter((g) => g.querySelector("text"));  // not the start dot
    boxes = [...Array.from(svg.querySelectorAll("text"), (t) => [...unit(t), 1000]), ...states.map((g) => [...unit(g), 1])];
    const e = B.steps[cur], el = e && e.element && svg.getElementById(e.element), fb = el && unit(el);
    focusBox = fb && fb[2] > fb[0] ? fb : null;
    focusLabel = el && el.querySelector("text") ? union(Array.from(el.querySelectorAll("text"), unit)) : focusBox;  // a long edge keeps its label in view
    const g = (svg.querySelector("g.graph") || svg).getBBox();
    const x0 = Math.min(base[0], g.x + shift[0], ...boxes.map((b) => b[0])) - PAD;
    const y0 = Math.min(base[1], g.y + shift[1], ...boxes.map((b) => b[1])) - PAD;
    const x1 = Math.max(base[0] + base[2], g.x + g.width + shift[0], ...boxes.map((b) => b[2])) + PAD;
    const y1 = Math.max(base[1] + base[3], g.y + g.height + shift[1], ...boxes.map((b) => b[3])) + PAD;
    content = [x0, y0, x1 - x0, y1 - y0];
    return true;
  }
  function size() { const h = $("#fsm-graph"); return [h.clientWidth, h.clientHeight]; }
  // the scale (px per unit) at which the whole drawing fits the panel
  function fitScale(box) { const [cw, ch] = size(); return Math.min(cw / box[2], ch / box[3]); }
  // a viewBox with the panel's own aspect ratio (so `meet` adds no margins), at k px per
  // unit around (cx, cy), moved a little where that keeps every label whole
  function place(k, cx, cy) {
    const [cw, ch] = size(), w = cw / k, h = ch / k;
    vb = [cx - w / 2, cy - h / 2, w, h];
    lastSize = [cw, ch];  // the size this view is shaped for
    snap(); apply();
  }
  // The default view: labels at LABEL_PX (larger where the whole fits, up to 1.5 times),
  // the whole drawing where it fits, else centred on the current element.
  function home() {
    if (!measure()) return;
    blind = false;
    const lo = LABEL_PX / minFont, k = Math.max(lo, Math.min(fitScale(content), 1.5 * lo));
    place(k, content[0] + content[2] / 2, content[1] + content[3] / 2);
  }
  // "fit": the whole focus view (or automaton) where its labels stay at FIT_PX or more;
  // otherwise FIT_PX, centred on the current element's neighbourhood (pan for the rest)
  function fit() {
    if (!measure()) return;
    const lo = FIT_PX / minFont, k = fitScale(content);
    if (k >= lo) { place(k, content[0] + content[2] / 2, content[1] + content[3] / 2); return; }
    const c = focusCentre();
    place(lo, c[0], c[1]);
  }
  function focusCentre() {
    const e = B.steps[cur] || {}, ids = [e.element, ...B.trail.slice(Math.max(0, (e.trail_index || 0) - 4), (e.trail_index || 0) + 4)];
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const id of ids) {
      const g = id && svg.getElementById(id);
      if (!g) continue;
      const b = g.getBBox();
      x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y); x1 = Math.max(x1, b.x + b.width); y1 = Math.max(y1, b.y + b.height);
    }
    if (x0 === Infinity) return [content[0] + content[2] / 2, content[1] + content[3] / 2];
    return [(x0 + x1) / 2 + shift[0], (y0 + y1) / 2 + shift[1]];
  }
  // Move the view (by at most half of it each way) so that no label straddles its
  // edges: the nearest of the places that put a label's edge at (or just past) the view's
  // edge; where none does, zoom in a little (up to 1.25 times: labels only grow) and try again.
  function snap() {
    boxes = null;  // measured anew: a fallback font (for the visible space) may have come since
    if (!measure() || !boxes.length) return;
    const cx = vb[0] + vb[2] / 2, cy = vb[1] + vb[3] / 2;
    let best = null;
    for (const f of [1, 0.95, 0.9, 0.85, 0.8]) {
      const w = vb[2] * f, h = vb[3] * f, r = [...snapAt(cx - w / 2, cy - h / 2, w, h), w, h];
      if (!best || r[2] < best[2]) best = r;
      if (!r[2]) break;
    }
    vb = [best[0], best[1], best[3], best[4]];
  }
  // [x, y, what is cut there: 1000 a label, 1 a state's circle] of the best place for a w x h view near (x, y)
  function snapAt(x, y, w, h) {
    const M = 1;  // a box closer than this to the edge counts as cut; those a view moved by up to half its size could cut:
    const fits = boxes.filter((b) => b[2] - b[0] < w - 2 * PAD && b[3] - b[1] < h - 2 * PAD &&
      b[2] > x - w / 2 && b[0] < x + 1.5 * w && b[3] > y - h / 2 && b[1] < y + 1.5 * h);
    // the current element stays wholly in view; one larger than the view (a long edge), its label
    const f = focusBox && (focusBox[2] - focusBox[0] > w - 2 * PAD || focusBox[3] - focusBox[1] > h - 2 * PAD) ? focusLabel : focusBox;
    const cuts = (x0, y0) => {
      let n = f && (f[0] < x0 || f[2] > x0 + w || f[1] < y0 || f[3] > y0 + h) ? 1e6 : 0;
      for (const b of fits) if (b[2] + M > x0 && b[0] - M < x0 + w && b[3] + M > y0 && b[1] - M < y0 + h &&
        (b[0] - M < x0 || b[2] + M > x0 + w || b[1] - M < y0 || b[3] + M > y0 + h)) n += b[4];
      return n;
    };
    const now = cuts(x, y);
    if (!now) return [x, y, 0];
    // a label's near edge at the view's edge, or just past it
    const cands = (at, a, len) => [at, ...fits.flatMap((b) => [b[a] - PAD, b[a + 2] + PAD - len, b[a + 2] + PAD, b[a] - PAD - len])]
      .filter((c) => Math.abs(c - at) <= len / 2)
      .sort((p, q) => Math.abs(p - at) - Math.abs(q - at)).slice(0, 60);
    let best = [x, y, now], bestD = 0;
    for (const cx of cands(x, 0, w)) for (const cy of cands(y, 1, h)) {
      const n = cuts(cx, cy), d = Math.hypot((cx - x) / w, (cy - y) / h);
      if (n < best[2] || (n === best[2] && d < bestD)) { best = [cx, cy, n]; bestD = d; }
    }
    return best;
  }
  // screen to viewBox units, measured at the labels' default size (Chrome lays text out at its size on screen)
  function unitsAtLabelSize() {
    const k0 = LABEL_PX / minFont, [cw, ch] = size();
    svg.setAttribute("viewBox", `${base[0]} ${base[1]} ${cw / k0} ${ch / k0}`);
    return svg.getScreenCTM().inverse();
  }
  function toSvg(ev) {
    const m = unitsAtLabelSize();
    return [m.a * ev.clientX + m.c * ev.clientY + m.e, m.b * ev.clientX + m.d * ev.clientY + m.f];
  }
  function apply() { reshape(); svg.setAttribute("viewBox", vb.map((x) => x.toFixed(1)).join(" ")); }
  // A panel resized since the view was shaped (presentation mode: a caption of more lines
  // leaves the graph less height) before the observer says so: the same scale and centre
  // in the panel's new shape (else `meet` would draw the old shape smaller)
  function reshape() {
    const [cw, ch] = size();
    if (!vb || !lastSize[0] || !cw || !ch || (cw === lastSize[0] && ch === lastSize[1])) return;
    const k = lastSize[0] / vb[2];
    vb = [vb[0] + vb[2] / 2 - cw / k / 2, vb[1] + vb[3] / 2 - ch / k / 2, cw / k, ch / k];
    lastSize = [cw, ch];
  }
  function centreOn(id, onlyIfHidden) {
    const g = svg && svg.getElementById(id);
    if (!g) return false;
    if (!measure()) return true;  // a hidden panel: placed when it is shown
    reshape();
    let b = g.getBBox();  // an element larger than the view (a long edge): its label
    if ((b.width > vb[2] - 2 * PAD || b.height > vb[3] - 2 * PAD) && g.querySelector("text")) b = g.querySelector("text").getBBox();
    const x0 = b.x + shift[0], y0 = b.y + shift[1], x1 = x0 + b.width, y1 = y0 + b.height;
    const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, [vx, vy, vw, vh] = vb;
    const seen = onlyIfHidden && cx > vx + vw * 0.1 && cx < vx + vw * 0.9 && cy > vy && cy < vy + vh;
    if (seen && x0 >= vx && x1 <= vx + vw && y0 >= vy && y1 <= vy + vh) { snap(); apply(); return true; }
    // partly cut (a long label at the view's edge): moved just enough; hidden: centred
    const by = (lo, hi, at, len) => !seen || hi - lo + 2 * PAD > len ? (lo + hi - len) / 2 - at :
      lo - PAD < at ? lo - PAD - at : hi + PAD > at + len ? hi + PAD - at - len : 0;
    vb[0] += by(x0, x1, vx, vw); vb[1] += by(y0, y1, vy, vh);
    snap();
    apply();
    return true;
  }
  // The drawn ones of `ids` in the panel, together: at the present scale where they fit,
  // else smaller down to FIT_PX labels; where even that is too small, the view goes as far
  // towards them as it can with `keep` (the current element) still wholly in it.
  function frame(ids, keep) {
    const gs = ids.map((id) => id && svg.getElementById(id)).filter((g) => g);
    if (!gs.some((g) => g.id !== keep)) return false;
    if (!measure()) return true;  // a hidden panel: placed when it is shown
    reshape();
    const box = (g) => { const b = g.getBBox(); return [b.x + shift[0], b.y + shift[1], b.x + b.width + shift[0], b.y + b.height + shift[1]]; };
    const bs = gs.map(box), u = union(bs);
    const [cw, ch] = size(), m = 2 * (PAD + minFont);  // a label's height of room each side
    const k = Math.max(FIT_PX / minFont, Math.min(cw / vb[2], cw / (u[2] - u[0] + m), ch / (u[3] - u[1] + m)));
    let cx = (u[0] + u[2]) / 2, cy = (u[1] + u[3]) / 2;
    const c = gs.find((g) => g.id === keep), w = cw / k, h = ch / k;
    if (c) {  // the view's centre, where the current element stays inside the view
      const b = box(c), clamp = (v, lo, hi) => lo > hi ? (lo + hi) / 2 : Math.min(Math.max(v, lo), hi);
      cx = clamp(cx, b[2] + PAD - w / 2, b[0] - PAD + w / 2);
      cy = clamp(cy, b[3] + PAD - h / 2, b[1] - PAD + h / 2);
    }
    place(k, cx, cy);
    return true;
  }
  function zoom(f, cx, cy) {
    reshape();
    const button = cx === undefined;
    if (button) { cx = vb[0] + vb[2] / 2; cy = vb[1] + vb[3] / 2; }
    vb = [cx - (cx - vb[0]) * f, cy - (cy - vb[1]) * f, vb[2] * f, vb[3] * f];
    if (button) snap();  // the wheel keeps the point under the pointer where it is
    apply();
  }
  // The panel was resized (its corner, full screen) or shown (a run that ended while
  // another tab was in front): a view made blind is placed now; otherwise the scale and
  // the centre stay, and the view takes the panel's new shape.
  function resized() {
    if (!svg) return;
    const [cw, ch] = size();
    if (!cw || !ch || (cw === lastSize[0] && ch === lastSize[1] && !blind)) return;
    if (blind || !vb || !lastSize[0]) {
      boxes = null; home();
      const e = B.steps[cur]; if (e && e.element) centreOn(e.element, true);
      return;
    }
    place(lastSize[0] / vb[2], vb[0] + vb[2] / 2, vb[1] + vb[3] / 2);
  }
  // Labels f times their usual size on screen (14 px, fit 10 px): the view placed anew
  function labels(f) {
    LABEL_PX = 14 * f; FIT_PX = 10 * f;
    if (!svg || !B) return;
    boxes = null; home();
    const e = B.steps[cur]; if (e && e.element) centreOn(e.element, true);
  }
  function toggleFull() {
    const box = $("#graph-box");
    if (!box) return;
    if (document.fullscreenElement === box) { document.exitFullscreen(); return; }
    if (box.classList.contains("cfsm-full")) { box.classList.remove("cfsm-full"); return; }
    const fallback = () => box.classList.add("cfsm-full");  // a window-filling panel
    if (box.requestFullscreen) box.requestFullscreen().catch(fallback); else fallback();
  }
  function panZoom(host) {
    if (zoomed.has(host)) return;  // Gradio patches the DOM in place: the same host may come back
    zoomed.add(host);
    new ResizeObserver(() => resized()).observe(host);
    host.addEventListener("wheel", (ev) => {
      if (!svg) return;
      ev.preventDefault();
      const [x, y] = toSvg(ev);
      zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, x, y);
    }, {passive: false});
    host.addEventListener("pointerdown", (ev) => {
      const r = host.getBoundingClientRect();
      if (ev.clientX > r.right - 18 && ev.clientY > r.bottom - 18) return;  // the resize corner
      if (svg) { drag = [ev.clientX, ev.clientY, vb[0], vb[1], svg.getScreenCTM().a]; moved = false; } });
    host.addEventListener("pointermove", (ev) => {
      if (!drag || !svg) return;
      const dx = ev.clientX - drag[0], dy = ev.clientY - drag[1];
      if (Math.abs(dx) + Math.abs(dy) > 3) moved = true;
      vb[0] = drag[2] - dx / drag[4]; vb[1] = drag[3] - dy / drag[4];
      apply();
    });
  }
  function mark(e) {
    svg.querySelectorAll(".current,.path,.jumped,.hint").forEach((x) => x.classList.remove("current", "path", "jumped", "hint"));
    const add = (id, c) => { const g = svg.getElementById(id); if (g) g.classList.add(c); };
    for (let i = 0; i < e.trail_index; i++) add(B.trail[i], "path");
    for (let i = 0; i < e.jumps_done; i++) B.jumps[i].forEach((id) => add(id, "jumped"));
    if (e.element) add(e.element, "current");
    $("#graph-where").innerHTML = e.segment_note ? `<span id="grammar-inactive">${esc(e.segment_note)}</span>` :
      (e.element ? `Current state <b>${esc(e.state)}</b>${e.place ? ` <span id="graph-place">${esc(e.place)}</span>` : ""}${e.position ? " \u2014 " + esc(e.position) : ""}` : "") + passedHtml(cur);
    outline(e);
    // the tour's chain stop: the jumped chain and the current state, both in the panel
    if (!(tourCentre && tourCentre[0] === cur && frame([e.element, ...tourCentre[1]], e.element)))
      centreOn(e.element, true);
  }
  function outline(e) {
    // a schema run: the pointers in writing order, the current one marked, each shaded by
    // the share of its characters forced or jumped (not chosen by the model)
    const host = $("#schema-outline");
    if (!host || !(B.outline || []).length) return;
    host.innerHTML = `<div class="cfsm-muted">Schema outline: where the output is, and how much of each part the model chose</div>` +
      B.outline.map(([ptr, model, forced, jumped]) => {
        const all = Math.max(1, model + forced + jumped), auto = (forced + jumped) / all;
        return `<div class="cfsm-orow${ptr === e.pointer ? " current" : ""}" data-ptr="${esc(ptr)}">` +
          `<code>${esc(ptr)}</code><span class="cfsm-obar" title="${esc(model)} chosen, ${esc(forced)} forced, ${esc(jumped)} jumped">` +
          `<span style="width:${(100 * jumped / all).toFixed(0)}%" class="j"></span><span style="width:${(100 * forced / all).toFixed(0)}%" class="f"></span></span>` +
          `<span class="cfsm-muted">${(100 * auto).toFixed(0)}% forced or jumped</span></div>`;
      }).join("");
  }
  function allowedHtml(e) {
    if (e.allowed === null || e.allowed === undefined) return "";  // the end: no step
    const list = e.allowed_sample || [], byProb = list.some((r) => r[2] !== null && r[2] !== undefined);
    const rows = list.map(([id, text, p, nxt, el]) =>
      `<div class="cfsm-arow"><span class="cfsm-tok${id === e.token_id ? " new" : ""}" title="id ${esc(id)}">${esc(text)}</span>` +
      `<span class="cfsm-p">${pct(p)}</span>` + (nxt === null || nxt === undefined ? "" :
      `<a class="cfsm-state" data-el="${esc(el)}" href="#">\u2192 state ${esc(nxt)}</a>`) + "</div>").join("");
    const more = e.free ? `<div class="cfsm-muted">No constraint: every token is allowed.</div>` :
      e.no_mask ? `<div class="cfsm-muted">No constraint in this segment: every token is allowed, except the stop while thinking and tokens that would run past a trigger.</div>` :
      e.allowed > list.length ? `<div class="cfsm-muted">\u2026 and ${esc((e.allowed - list.length).toLocaleString())} more${byProb ? ", less likely" : ""}</div>` : "";
    const how = B.replay ? "the engine's token and its alternatives first (its own probabilities), then by id" :
      byProb ? "most likely first (probability after masking)" : "by token id (this trace predates probabilities)";
    return `<div class="cfsm-panel" id="allowed-panel"><h4>Allowed tokens: ${esc(e.allowed.toLocaleString())} / ${esc(B.vocab.toLocaleString())}` +
      ` <span class="cfsm-muted">${list.length ? how : ""}</span></h4>${rows}${more}</div>`;
  }
  function maskHtml(e) {
    if (e.no_mask) return `<h4>Allowed-token <a class="cfsm-g" href="#g-mask">mask</a></h4><div class="cfsm-muted" id="mask-none">No constraint in this segment: nothing is masked (${esc(e.allowed.toLocaleString())} / ${esc(B.vocab.toLocaleString())} allowed).</div>`;
    if (B.pending && B.masks[e.mask] === null) return `<h4>Allowed-token <a class="cfsm-g" href="#g-mask">mask</a></h4><div class="cfsm-muted cfsm-loading" id="mask-loading">Loading this step's mask \u2026</div>`;
    if (e.mask === undefined || e.mask === null || !B.masks[e.mask]) return `<h4>Allowed-token <a class="cfsm-g" href="#g-mask">mask</a></h4><div class="cfsm-muted">No mask at this position.</div>`;
    // positions as shares of the picture, which the page may draw smaller than 2 px per id
    const w = B.mask_width, rows = Math.ceil(B.vocab / w), k = Number(e.token_id) || 0;
    const spot = (id, r) => `left:calc(${(100 * (id % w + 0.5) / w).toFixed(3)}% - ${r}px);` +
      `top:calc(${(100 * (Math.floor(id / w) + 0.5) / rows).toFixed(3)}% - ${r}px)`;
    const list = e.allowed_sample || [];
    // a handful of allowed ids are 2 px dots on a grey field: ring each one and name it
    const few = !e.free && e.allowed > 0 && e.allowed <= FEW_ALLOWED && list.length === e.allowed;
    // adjacent ids (a run on one row of the picture, such as the digits) share one
    // stretched ring: single rings 2 px apart merged into one blob
    const runs = [];
    if (few) [...list.map((r) => Number(r[0]))].sort((a, b) => a - b).forEach((id) => {
      const last = runs[runs.length - 1];
      if (last && id === last[1] + 1 && Math.floor(id / w) === Math.floor(last[0] / w)) last[1] = id;
      else runs.push([id, id]);
    });
    const rings = runs.filter(([a, b]) => a !== b || a !== k).map(([a, b]) => a === b ?
      `<span class="cfsm-allowed-ring" title="id ${esc(a)}" style="${spot(a, 7)}"></span>` :
      `<span class="cfsm-allowed-ring run" title="ids ${esc(a)}-${esc(b)}" style="${spot(a, 7)};` +
      `width:calc(${(100 * (b - a) / w).toFixed(3)}% + 10px);border-radius:7px"></span>`).join("");
    const legend = few ? `<div class="cfsm-muted" id="mask-few">The ${esc(e.allowed)} allowed id${e.allowed === 1 ? "" : "s"}, ringed: ` +
      list.map((r) => `${esc(r[0])} <span class="cfsm-tok">${esc(r[1])}</span>`).join(", ") + "</div>" : "";
    return `<h4>Allowed-token <a class="cfsm-g" href="#g-mask">mask</a>: ${esc(e.allowed.toLocaleString())} / ${esc(B.vocab.toLocaleString())} (chosen id ${esc(k)})</h4>` +
      `<div class="cfsm-mask" title="row = id / ${w}, column = id % ${w}"><img id="mask-img" src="${B.masks[e.mask]}" width="${2 * w}">` +
      rings + `<span class="cfsm-chosen" style="${spot(k, 6)}"></span></div>${legend}<div class="cfsm-muted" id="mask-hover">blue = allowed; hover for ids</div>`;
  }
  function topHtml(e) {
    if (!e.top) return "";
    const rows = e.top.map(([t, id, raw, m]) => `<div class="cfsm-trow"><span class="cfsm-tok" title="id ${esc(id)}">${esc(t)}</span>` +
      (raw === null ? `<span class="cfsm-p cfsm-muted" title="not among the model's own top-k: its share is not recorded">below top-k</span>` :
      `<span class="bar raw" style="width:${(Number(raw) * 120).toFixed(0)}px"></span><span class="cfsm-p">${pct(raw)}</span>`) +
      `<span class="bar msk" style="width:${(Number(m) * 120).toFixed(0)}px"></span><span class="cfsm-p">${pct(m)}</span></div>`).join("");
    return `<h4>Top-k: model (grey) vs after the mask (blue) \u00b7 <a class="cfsm-g" href="#g-feasible-mass">feasible mass</a> ${pct(e.feasible_mass)}</h4>${rows}`;
  }
  // The registered panels (viz/step_panels.py): each one's HTML at position k, "" hides it
  // (null: still in the bundle's second part, merged by mergeRest).
  function showPanels(k) {
    for (const [name, col] of Object.entries(B.panels || {})) {
      const host = root.querySelector(`[data-panel="${name}"]`);
      if (host) host.innerHTML = col[k] || "";
    }
  }
  function show(k) {
    if (!B || !root) return;
    const t0 = performance.now();
    k = B.live ? 0 : Math.max(0, Math.min(B.steps.length - 1, parseInt(k, 10) || 0));
    const e = B.steps[k];
    cur = k;
    const lead = B.live ? `<b>Decoding \u2026</b> the view follows the run (scrub it once the run ends). ` :
      k === B.n ? `<b>End of the run.</b> ` : "";
    $("#caption").innerHTML = lead + e.caption;
    if (B.layouts.length) {
      if (e.layout !== L) setLayout(e.layout);
      if (svg) mark(e);
    }
    const out = $("#output-text");
    if (out) { out.querySelector(".done").textContent = chars.slice(0, e.offset).join(""); out.querySelector(".rest").textContent = chars.slice(e.offset).join(""); }
    $("#jump-html").innerHTML = e.jump_html || `<div class="cfsm-panel" id="jump-panel"><h4><a class="cfsm-g" href="#g-jump">Jump-forward</a></h4><div class="cfsm-muted">${esc(B.no_jump)}</div></div>`;
    showPanels(k);
    $("#allowed-html").innerHTML = allowedHtml(e);
    $("#mask-panel").innerHTML = maskHtml(e);
    $("#topk-panel").innerHTML = topHtml(e);
    for (const [c, s] of chipEls) { c.classList.toggle("cur", s === k); c.classList.toggle("future", s > k); }
    root.classList.remove("stale");
    root.dataset.renderMs = (performance.now() - t0).toFixed(1);
    root.dataset.step = B.live ? "live" : String(k);  // "0" says a finished run's view is drawn
  }
  function stepOf(id) {
    const i = B.trail.indexOf(id);
    if (i < 0) return -1;
    return B.steps.findIndex((e) => e.trail_index > i);
  }
  function setSlider(k) {
    show(k);
    const r = document.querySelector("#step-slider input[type=range]");
    if (r && String(r.value) !== String(k)) { r.value = k; r.dispatchEvent(new Event("input", {bubbles: true})); }
  }
  function onClick(ev) {
    const z = ev.target.closest("[data-z]");
    if (z) { ev.preventDefault(); if (!svg) return; const a = z.dataset.z;
      if (a === "in") zoom(1 / 1.3); else if (a === "out") zoom(1.3);
      else if (a === "fit") fit(); else if (a === "full") toggleFull(); else centreOn(B.steps[cur].element, false);
      return; }
    const st = ev.target.closest("a.cfsm-state");
    if (st) {
      ev.preventDefault();
      svg && svg.querySelectorAll(".hint").forEach((x) => x.classList.remove("hint"));
      const g = svg && svg.getElementById(st.dataset.el);
      if (g) { g.classList.add("hint"); centreOn(st.dataset.el, true); } else st.title = "not drawn in this focus view";
      return;
    }
    const tg = ev.target.closest("[data-tour-go]");
    if (tg) { ev.preventDefault(); tourGo(parseInt(tg.dataset.tourGo, 10)); return; }
    if (ev.target.closest("[data-tour-start]")) { ev.preventDefault(); startTour(); return; }
    if (ev.target.closest("#glossary-pop [data-close]")) { ev.preventDefault(); closePop(); return; }
    if (ev.target.closest("#glossary-pop [data-all]")) {
      ev.preventDefault(); closePop(); const d = root.querySelector("#glossary");
      if (d) { d.open = true; d.scrollIntoView({block: "nearest"}); } return; }
    const gl = ev.target.closest("a.cfsm-g");
    if (gl) { ev.preventDefault(); openPop(gl); return; }
    if (!ev.target.closest("#glossary-pop")) closePop();
    if (ev.target.closest("#dl-svg")) { download(ev.target.closest("#dl-svg")); return; }
    const g = ev.target.closest("#fsm-graph g.node, #fsm-graph g.edge");
    if (g && !moved) { const k = stepOf(g.id); if (k >= 0) { setSlider(k); passedNote(g, k); } }
  }
  // The tour: this run's first choice, chain, jump and re-tokenization, one stop at a time.
  function tourStops() {
    const stops = [], find = (f) => B.steps.findIndex(f);
    // a model's own choice (not a re-decided boundary), then a jump made after a step
    const choice = find((e) => e.allowed > 1 && !e.free && !e.jump_html && !/back-off|re-decided/.test(e.caption));
    if (choice >= 0) stops.push([choice, "#allowed-html", "A choice",
      "Several tokens fit the constraint here (listed under Allowed tokens; the mask below shows every one). " +
      "The tokens that do not fit are masked out, and the model's probabilities pick among the rest."]);
    // the jump after a step's token (not the one before the first step) whose chain starts
    // nearest after the step's state, so that the two fit the graph's panel together (the
    // first such jump may follow a long token: ~1000 px from its state at 14 px labels)
    const gaps = B.steps.map((e, k) => {
      const c = k > 0 && e.jump_html && B.jumps[(e.jumps_done || 0) - 1], i = c ? B.trail.indexOf(c[0], Math.max(0, e.trail_index - 1)) : -1;
      return i < 0 ? Infinity : i - e.trail_index;
    });
    const near = Math.min(...gaps);
    const jump = near < Infinity ? gaps.indexOf(near) : Math.max(find((e, k) => k > 0 && e.jump_html), find((e) => e.jump_html));
    if (jump >= 0) {
      stops.push([jump, "#fsm-graph", "A chain",
        "After this step's token the automaton has exactly one way forward for a while: such a run " +
        "of states is drawn as one thick edge labelled with its text, a chain. The one this run jumps " +
        "along is marked as jumped."]);
      stops.push([jump, "#jump-html", "A jump",
        "The chain's text is forced, so it is appended without asking the model (jump-forward): one " +
        "forward pass reads all of it, instead of one pass per token."]);
    }
    const retok = find((e) => e.jump_html && e.jump_html.includes("cfsm-tok changed"));
    if (retok >= 0) stops.push([retok, "#jump-html", "A re-tokenization",
      "After a jump the output is split into tokens again, as the model's tokenizer would split the " +
      "whole text. Tokens in red changed, so the model's cache is cut back to just before them."]);
    return stops;
  }
  function startTour() {
    const stops = tourStops();
    tour = {stops, i: 0, missing: ["A choice", "A chain", "A jump", "A re-tokenization"].filter((t) => !stops.some((x) => x[2] === t))};
    tourStop();
  }
  function tourStop() {
    tourCentre = null;
    root.querySelectorAll(".tour-focus").forEach((x) => x.classList.remove("tour-focus"));
    let box = root.querySelector("#tour-box");
    if (!tour) { if (box) box.remove(); return; }
    if (!box) { box = document.createElement("div"); box.id = "tour-box"; box.className = "cfsm-tour"; root.prepend(box); }
    const n = tour.stops.length, done = tour.i >= n;
    if (!done) {
      const [k, sel, title] = tour.stops[tour.i];
      // the chain stop: the jumped chain in the middle of the panel, not only the state
      // (mark() reads this when the slider's step is drawn, whenever that happens)
      const chain = title === "A chain" ? (B.jumps[(B.steps[k].jumps_done || 0) - 1] || []) : [];
      tourCentre = chain.length ? [k, chain] : null;
      setSlider(k);
      const el = $(sel); if (el) { el.classList.add("tour-focus"); el.scrollIntoView({block: "nearest"}); }
      // the box sits on the side away from what the stop points at, so it covers none of it
      const r = el ? el.getBoundingClientRect() : null;
      box.classList.toggle("left", !!r && r.left + r.width / 2 > window.innerWidth / 2);
    }
    const [, , title, text] = done ? [0, "", "End of the tour", "Scrub the slider to see every step; the terms in blue open the glossary."] : tour.stops[tour.i];
    const miss = done && tour.missing.length ? ` (not in this run: ${tour.missing.join(", ").toLowerCase()})` : "";
    box.dataset.stop = String(tour.i);
    box.innerHTML = `<b>${done ? "" : `Stop ${tour.i + 1} of ${n}: `}${esc(title)}.</b> ${esc(text)}${esc(miss)} ` +
      (tour.i > 0 ? `<button data-tour-go="-1">Back</button>` : "") +
      (done ? "" : `<button data-tour-go="1">Next</button>`) + `<button data-tour-go="0">End tour</button>`;
  }
  function tourGo(d) { if (!tour) return; if (d === 0) tour = null; else tour.i = Math.max(0, Math.min(tour.stops.length, tour.i + d)); tourStop(); }
  // A glossary term opens beside the link (the page does not scroll away to the glossary).
  function openPop(a) {
    const id = (a.getAttribute("href") || "").slice(1), dt = root.querySelector(`#${CSS.escape(id)}`);
    if (!dt) return;
    closePop();
    const pop = document.createElement("div"), r = a.getBoundingClientRect(), box = root.getBoundingClientRect();
    pop.id = "glossary-pop"; pop.className = "cfsm-pop"; pop.setAttribute("role", "dialog");
    pop.dataset.term = id.replace(/^g-/, "");
    pop.innerHTML = `<b>${esc(dt.textContent)}</b> <a href="#" data-close title="close">✕</a>` +
      `<div>${esc(dt.nextElementSibling ? dt.nextElementSibling.textContent : "")}</div>` +
      `<a href="#" data-all>all terms</a>`;
    pop.style.left = `${Math.max(0, Math.min(r.left - box.left, box.width - 340))}px`;
    pop.style.top = `${r.bottom - box.top + 4}px`;
    root.appendChild(pop);
  }
  function closePop() { const p = root && root.querySelector("#glossary-pop"); if (p) p.remove(); }
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape") return;
    const full = root && root.querySelector("#graph-box.cfsm-full");
    if (full) full.classList.remove("cfsm-full");
    else if (root && root.querySelector("#glossary-pop")) closePop(); else if (tour) tourGo(0);
  });
  // A state that a token or a jump went through has no position of its own: the scrubber
  // shows the first one after it, so say which state was clicked and which is shown.
  // (kept for its position: the slider's own change event draws that position once more)
  function passedNote(g, k) {
    const e = B.steps[k];
    passed = g.id.startsWith("s") && e.element !== g.id ? {k, id: g.id} : null;
    if (passed) show(k);
  }
  function passedHtml(k) {
    if (!passed || passed.k !== k) return "";
    const g = svg && svg.getElementById(passed.id); if (g) g.classList.add("hint");
    return `<div class="cfsm-muted" id="passed-note">State <b>${esc(passed.id.slice(1))}</b> ` +
      `was passed inside a token or a jump, so no position stops there; shown: the first position after it ` +
      `(state <b>${esc(B.steps[k].state)}</b>).</div>`;
  }
  function download(a) {
    if (!svg) return;
    const c = svg.cloneNode(true);
    c.setAttribute("viewBox", (content || base).join(" "));
    const st = document.createElementNS("http://www.w3.org/2000/svg", "style");
    st.textContent = B.mark_css || ""; c.insertBefore(st, c.firstChild);
    if (blobUrl) URL.revokeObjectURL(blobUrl);
    blobUrl = URL.createObjectURL(new Blob([new XMLSerializer().serializeToString(c)], {type: "image/svg+xml"}));
    a.href = blobUrl; a.download = `fsm-step-${root.dataset.step}.svg`;
  }
  function play() {
    pause();
    if (B && B.live) return;  // the run is still decoding: its view follows it already
    playing = setInterval(() => {
      const k = parseInt(root && root.dataset.step, 10);
      if (!B || isNaN(k) || k >= B.steps.length - 1) return pause();
      setSlider(k + 1);
    }, 600);
  }
  function pause() { if (playing) clearInterval(playing); playing = null; }
  function stale() { const el = document.querySelector("#step-view"); if (el) el.classList.add("stale"); pause(); }
  document.addEventListener("mousemove", (ev) => {
    if (ev.target.id !== "mask-img" || !B) return;
    const r = ev.target.getBoundingClientRect(), w = B.mask_width;
    const id = Math.floor((ev.clientY - r.top) / r.height * ev.target.naturalHeight) * w + Math.floor((ev.clientX - r.left) / r.width * w);
    const h = document.querySelector("#mask-hover");
    if (h && id < B.vocab) h.textContent = `token id ${id}`;
  });
  window.addEventListener("pointerup", () => { drag = null; });
  // Gradio mutates the page many times per streamed update: look for a new view once a frame
  let pending = false;
  new MutationObserver(() => {
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; attach(); }); }
  }).observe(document.documentElement, {childList: true, subtree: true});
  return {show, play, pause, stale, setSlider, attach, labels};
})();
