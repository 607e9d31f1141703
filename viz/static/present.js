// Presentation mode, for a projector: the caption, the token strip and the graph in large
// type, with the step controls (the slider, Play; the arrow keys step), all else hidden.
// The page's elements stay where Gradio put them: a class on <body> (CSS: viz/present.py),
// the ancestors of what stays marked (cfsm-pp; their other children are hidden), marked
// again as Gradio redraws while the mode is on (a new run replaces the step view).
window.cfsmPresent = (() => {
  const KEEP = ["#step-controls", "#step-view-host", "#live-strip"];
  const SCALE = 1.5;  // the graph's labels: 21 px on screen by default, "fit" 15 px
  let on = false, queued = false, lastH = 0;
  function mark() {
    for (const sel of KEEP) {
      const el = document.querySelector(sel);
      if (!el) continue;
      el.classList.add("cfsm-keep");
      for (let p = el.parentElement; p && p !== document.documentElement; p = p.parentElement) p.classList.add("cfsm-pp");
    }
  }
  function unmark() { document.querySelectorAll(".cfsm-pp,.cfsm-keep").forEach((x) => x.classList.remove("cfsm-pp", "cfsm-keep")); }
  // the step view takes the window's height below what stays above it
  function fit() {
    const v = document.querySelector("#step-view");
    if (!v) return;
    const top = v.getBoundingClientRect().top + window.scrollY;
    const h = Math.max(300, Math.floor(window.innerHeight - top - 12));
    if (Math.abs(h - lastH) > 1) { lastH = h; document.body.style.setProperty("--cfsm-present-h", `${h}px`); }
  }
  function tick() {
    if (!on) return;
    mark(); fit();
    // the current token in the strip's view; the live strip shows its latest tokens
    const s = document.querySelector("#step-view #strip-html"), c = s && s.querySelector(".cfsm-chip.cur");
    if (c) {
      const a = s.getBoundingClientRect(), r = c.getBoundingClientRect();
      if (r.top < a.top || r.bottom > a.bottom) s.scrollTop += r.top - a.top - (a.height - r.height) / 2;
    }
    const l = document.querySelector("#live-strip .cfsm-strip");
    if (l) l.scrollTop = l.scrollHeight;
  }
  function toggle(want) {
    on = want === undefined ? !on : !!want;
    document.body.classList.toggle("cfsm-present", on);
    const b = document.querySelector("#present");
    if (b) b.setAttribute("aria-pressed", String(on));
    if (on) { mark(); window.scrollTo(0, 0); tick(); } else {
      unmark(); lastH = 0; document.body.style.removeProperty("--cfsm-present-h");
    }
    if (window.cfsm) window.cfsm.labels(on ? SCALE : 1);
  }
  // capture: before the step view's own Escape (which would end a tour, hidden here)
  document.addEventListener("keydown", (ev) => {
    if (!on || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "Escape") {
      // a full-screen graph or an open glossary term closes first
      if (document.fullscreenElement || document.querySelector("#graph-box.cfsm-full, #glossary-pop")) return;
      ev.preventDefault(); ev.stopImmediatePropagation();
      toggle(false);
      return;
    }
    if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
    const t = ev.target;  // a box, or the slider itself (its own keys move it)
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    const v = document.querySelector("#step-view"), k = parseInt(v ? v.dataset.step : "", 10);
    if (isNaN(k) || k < 0 || !window.cfsm) return;  // no run yet, or one still decoding ("live")
    ev.preventDefault();
    window.cfsm.setSlider(Math.max(0, Math.min(Number(v.dataset.steps) || 0, k + (ev.key === "ArrowRight" ? 1 : -1))));
  }, true);
  new MutationObserver(() => {
    if (!on || queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; tick(); });
  }).observe(document.documentElement, {childList: true, subtree: true});
  window.addEventListener("resize", () => { if (on) tick(); });
  return {toggle, on: () => on};
})();
