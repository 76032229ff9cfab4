// Live parts: every element with data-poll="URL" is refreshed from that server-rendered
// fragment every data-poll-ms milliseconds (the server escapes everything it renders).
"use strict";
(function () {
  function poll(el) {
    const every = Math.max(Number(el.dataset.pollMs) || 1000, 100);
    async function tick() {
      try {
        const response = await fetch(el.dataset.poll, {
          credentials: "same-origin",
          headers: { Accept: "text/html" },
        });
        if (response.ok) {
          el.innerHTML = await response.text();
          el.dataset.refreshed = String(Number(el.dataset.refreshed || 0) + 1);
          el.classList.remove("stale");
          // charts.js redraws what it drew inside (the overview's sparklines).
          el.dispatchEvent(new CustomEvent("emq:refreshed", { bubbles: true }));
        } else {
          el.classList.add("stale");
        }
      } catch (error) {
        el.classList.add("stale");
      }
      window.setTimeout(tick, every);
    }
    window.setTimeout(tick, every);
  }
  document.querySelectorAll("[data-poll]").forEach(poll);
  // A tab's "tick all": ticks or clears every job box of the form it names (bulk actions).
  document.querySelectorAll("input[data-tick-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      const boxes = document.querySelectorAll('input[name="job_id"][form="' + all.dataset.tickAll + '"]');
      boxes.forEach(function (box) { box.checked = all.checked; });
    });
  });
})();
