"""Validates a JUnit XML file against the JUnit schema that Jenkins' xunit plugin publishes
(junit-10.xsd, MIT), as pytest's own tests do. The schema is read straight out of pytest's source
distribution from PyPI, which ships it as testing/example_scripts/junit-10.xsd; nothing is copied
into this repository. Prints "valid" or the schema's reason, and exits 1 when invalid.

Usage: validate_junit.py FILE PYTEST_SDIST_TAR_GZ
"""

import io
import sys
import tarfile

import xmlschema

MEMBER = "testing/example_scripts/junit-10.xsd"


def schema_from(sdist):
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.name.endswith("/" + MEMBER):
                text = archive.extractfile(member).read().decode("utf-8")
                return xmlschema.XMLSchema(io.StringIO(text))
    raise SystemExit(f"{sdist} has no {MEMBER}")


def main():
    schema = schema_from(sys.argv[2])
    try:
        schema.validate(sys.argv[1])
    except xmlschema.XMLSchemaValidationError as err:
        print(f"invalid: {err.reason} at {err.path}")
        sys.exit(1)
    print("valid")


if __name__ == "__main__":
    main()
