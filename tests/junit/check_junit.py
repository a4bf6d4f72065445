"""trainshim audit's JUnit XML read as CI systems read it: validated by xmllint against junit.xsd
(the format as its documentation describes it) and parsed by junitparser, a reader of the kind CI
plugins are. A run of one process without a launcher that copies through pageable memory, audited
with a 1-byte pageable limit: one suite, a case per rule for its one process, each failed exactly
when the audit's JSON has violations of that rule, the counts on the suite and on the document
those of the cases.

Usage: check_junit.py TRAINSHIM_CLI PROGRAM JUNIT_XSD
"""
import json
import os
import subprocess
import sys
import tempfile

from junitparser import Error, Failure, JUnitXml, Skipped


def main():
    cli, program, xsd = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as scratch:
        db, policy, xml_path = (os.path.join(scratch, name) for name in ("run.db", "policy.toml", "junit.xml"))
        env = dict(os.environ, TRAINSHIM_JOB=f"junit_{os.getpid()}")
        subprocess.run([cli, "run", "--no-report", "--out", db, "--", program], check=True, env=env)
        with open(policy, "w", encoding="utf-8") as f:
            f.write("[limits]\npageable_bytes_per_step = 1\n")
        audit = [cli, "audit", db, "--policy", policy, "--format"]
        junit = subprocess.run(audit + ["junit"], capture_output=True, text=True)
        assert junit.returncode == 1, f"audit exit {junit.returncode}: {junit.stderr}"
        with open(xml_path, "w", encoding="utf-8") as f:
            f.write(junit.stdout)
        rules = json.loads(subprocess.run(audit + ["json"], capture_output=True, text=True).stdout)["rules"]

        valid = subprocess.run(["xmllint", "--noout", "--schema", xsd, xml_path], capture_output=True, text=True)
        assert valid.returncode == 0, f"not valid against {xsd}: {valid.stderr}"

        document = JUnitXml.fromfile(xml_path)
        suites = list(document)
        assert len(suites) == 1, f"{len(suites)} suites"
        suite = suites[0]
        cases = list(suite)
        failed_rules = {r["rule"] for r in rules if r["violations"]}
        assert failed_rules and "pageable_bytes_per_step" in failed_rules, failed_rules
        assert [c.classname for c in cases] == [f"trainshim.audit.{r['rule']}" for r in rules], \
            [c.classname for c in cases]
        for case, rule in zip(cases, rules):
            assert case.name == "no rank", case.name
            assert case.time == 0, case.time
            failures = [r for r in case.result if isinstance(r, Failure)]
            assert not [r for r in case.result if isinstance(r, (Error, Skipped))], case.result
            if rule["violations"]:
                assert len(failures) == 1 and not case.is_passed, f"{rule['rule']}: {case.result}"
                for violation in rule["violations"]:
                    assert violation["message"] in failures[0].text, (violation["message"], failures[0].text)
            else:
                assert case.is_passed, f"{rule['rule']}: {case.result}"
        for counted in (suite, document):
            assert counted.tests == len(rules), (counted.tests, len(rules))
            assert counted.failures == len(failed_rules), (counted.failures, failed_rules)
            assert counted.errors == 0 and counted.skipped == 0, (counted.errors, counted.skipped)
            assert counted.time >= 0, counted.time
        print(f"junit: {len(cases)} cases, {len(failed_rules)} failed ({', '.join(sorted(failed_rules))}), "
              f"valid against {os.path.basename(xsd)}, read by junitparser")


if __name__ == "__main__":
    main()
