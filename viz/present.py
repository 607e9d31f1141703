"""Presentation mode's CSS (for a projector): the caption, the token strip and the graph
in large type, with the step controls; static/present.js puts the class on <body> and
marks the ancestors of what stays (`cfsm-pp`); every other child of those is hidden."""

from __future__ import annotations

# Sizes on screen: the caption 24 px, the chips 24 px (the graph's labels: 21 px, set by
# the script). The step view takes the window's height below the controls
# (--cfsm-present-h, measured by the script): the graph gets what the caption and the
# strip (at most a few lines, scrolled to the current token) leave.
PRESENT_CSS = """
body.cfsm-present .cfsm-pp>:not(.cfsm-pp):not(.cfsm-keep){display:none !important;}
body.cfsm-present .cfsm-pp:not(body):not(html){padding:0 !important;margin:0 !important;\
border:0 !important;max-width:none !important;min-height:0 !important;gap:4px !important;}
body.cfsm-present .gradio-container{padding:4px 10px !important;}
body.cfsm-present #view-options{display:none !important;}
body.cfsm-present #step-buttons{flex-direction:row !important;align-items:center;\
flex-wrap:wrap;gap:6px;}
body.cfsm-present #step-buttons>button{width:auto !important;flex:1 1 auto;}
body.cfsm-present #present{outline:3px solid #f97316;outline-offset:-3px;}
body.cfsm-present #step-view{display:flex;flex-direction:column;gap:4px;\
height:var(--cfsm-present-h,80vh);box-sizing:border-box;overflow:hidden;}
body.cfsm-present #step-view :is(.cfsm-tour-start,#tour-box,.cfsm-col-side,#graph-note,\
#schema-outline,#graph-legend,#glossary,.cfsm-row:has(>#mask-panel)){display:none !important;}
body.cfsm-present #caption{flex:0 0 auto;font-size:24px;line-height:1.35;max-height:32%;\
overflow-y:auto;margin:0;}
body.cfsm-present #step-view>.cfsm-row{flex:1 1 0;min-height:0;flex-wrap:nowrap;}
body.cfsm-present .cfsm-col-graph{display:flex;flex-direction:column;min-height:0;}
body.cfsm-present #graph-where{font-size:20px;color:#334155;}
body.cfsm-present #graph-box{flex:1 1 0;min-height:0;display:flex;flex-direction:column;}
body.cfsm-present .cfsm-graph-tools button{font-size:16px;}
body.cfsm-present #fsm-graph{flex:1 1 0;height:auto !important;min-height:120px;resize:none;}
body.cfsm-present #strip-html{flex:0 0 auto;font-size:24px;max-height:5.5em;overflow-y:auto;}
body.cfsm-present .cfsm-strip{font-size:24px;line-height:1.7;}
body.cfsm-present #live-strip .cfsm-strip{max-height:6.8em;overflow-y:auto;}
body.cfsm-present .cfsm-strip>.cfsm-legend,body.cfsm-present .cfsm-strip>.cfsm-muted{\
display:inline-block;margin-right:12px;font-size:18px;}
body.cfsm-present .cfsm-strip .cfsm-legend span,body.cfsm-present .cfsm-seg-label{font-size:18px;}
"""
