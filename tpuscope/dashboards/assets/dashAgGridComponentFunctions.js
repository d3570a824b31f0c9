/* Grid cell renderers. User strings (run names) are React text children: never parsed as
   Markdown or HTML, so a run name can neither fetch a URL nor inject markup. */
var dagcomponentfuncs = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});

dagcomponentfuncs.RunLink = function (props) {
  var id = props.data && props.data.run_id;
  if (!id) {
    return String(props.value == null ? "" : props.value);
  }
  var link = React.createElement("a", {href: "/run/" + encodeURIComponent(id), className: "run-link"},
                                 String(props.value == null ? id : props.value));
  if (!props.data.live) {
    return link;
  }
  return React.createElement("span", null, link,
                             React.createElement("span", {className: "badge live", title: "in progress"}, "live"));
};
