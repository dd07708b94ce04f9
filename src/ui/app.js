// Live tables: an element with data-live="ms" is fetched again every so many milliseconds and
// replaced by the same element of the fresh page, while the page is visible.
(function () {
  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = parseInt(el.getAttribute("data-live"), 10) || 2000;
    setInterval(function () {
      if (document.hidden) return;
      fetch(location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (text) {
          if (!text) return;
          var fresh = new DOMParser().parseFromString(text, "text/html").getElementById(el.id);
          if (fresh) el.innerHTML = fresh.innerHTML;
        })
        .catch(function () {});
    }, every);
  });
})();
