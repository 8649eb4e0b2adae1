"""The AWS deployment: template.yaml (CloudFormation), and the code that reads it (template.py)."""
