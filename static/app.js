// ToolLens pages: render the figures, wire the confusion cells and the run picker.
// Data arrives as JSON in <script type="application/json"> blocks; nothing is built from HTML strings.
(function () {
  "use strict";

  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function renderFigures() {
    if (!window.Plotly) { return; }
    document.querySelectorAll(".plot[data-figure]").forEach(function (div) {
      var fig = readJSON(div.getAttribute("data-figure"));
      if (!fig) { return; }
      // no mode bar: nothing can be sent to Plotly's cloud, and no invisible tab stops
      window.Plotly.newPlot(div, fig.data, fig.layout,
        { responsive: true, displaylogo: false, displayModeBar: false, showSendToCloud: false, plotlyServerURL: "" });
      div.setAttribute("data-rendered", "1");
    });
  }

  function wireCompare() {
    var form = document.getElementById("compare-form");
    if (!form) { return; }
    var button = document.getElementById("compare-button");
    function update() {
      var picked = Array.prototype.slice.call(form.querySelectorAll("input.pick:checked"))
        .map(function (c) { return parseInt(c.value, 10); })
        .sort(function (x, y) { return x - y; });
      button.disabled = picked.length !== 2;
      // A is the older run (the smaller id), B the newer, however the table is sorted
      document.getElementById("cmp-a").value = picked.length === 2 ? picked[0] : "";
      document.getElementById("cmp-b").value = picked.length === 2 ? picked[1] : "";
    }
    form.addEventListener("change", update);
    update();
  }

  function wireSort() {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      table.querySelectorAll("th[data-sort]").forEach(function (th, i) {
        th.tabIndex = 0;
        function sort() {
          var col = Array.prototype.indexOf.call(th.parentNode.children, th);
          var numeric = th.getAttribute("data-sort") === "num";
          var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
          var body = table.tBodies[0];
          var rows = Array.prototype.slice.call(body.rows);
          rows.sort(function (a, b) {
            var x = a.cells[col], y = b.cells[col];
            var vx = x.getAttribute("data-value") || x.textContent.trim();
            var vy = y.getAttribute("data-value") || y.textContent.trim();
            if (numeric) { return dir * (parseFloat(vx) - parseFloat(vy)); }
            return dir * vx.localeCompare(vy);
          });
          rows.forEach(function (r) { body.appendChild(r); });
          table.querySelectorAll("th[aria-sort]").forEach(function (h) { h.removeAttribute("aria-sort"); });
          th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        }
        th.addEventListener("click", sort);
        th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
      });
    });
  }

  // Plotly (4.8 MB; seconds to start on a slow machine) only on a page with a chart, and only once the
  // page has loaded: the tables and links are usable at once, the charts follow.
  function loadPlotly() {
    var meta = document.querySelector("meta[name=plotly]");
    if (!meta || !document.querySelector(".plot[data-figure]")) { return; }
    var script = document.createElement("script");
    script.src = meta.getAttribute("content");
    script.addEventListener("load", renderFigures);
    document.head.appendChild(script);
  }

  window.addEventListener("load", loadPlotly);

  document.addEventListener("DOMContentLoaded", function () {
    wireCompare();
    wireSort();
  });
})();
