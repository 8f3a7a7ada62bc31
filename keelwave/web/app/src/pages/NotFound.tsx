import { Link } from "../router";

// An address the dashboard has no page for: said plainly, not the Overview in disguise.
export function NotFound(props: { path: string }) {
  return (
    <section className="not-found">
      <h1>Page not found</h1>
      <p>The dashboard has no page at <code>{props.path}</code>.</p>
      <p><Link to="/">Overview</Link> · <Link to="/runs">Runs</Link> · <Link to="/tools">Tools</Link> · <Link to="/cost">Cost</Link></p>
    </section>
  );
}
