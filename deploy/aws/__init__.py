"""The AWS deployment: the CloudFormation templates (*.yaml, shop.yaml their root), and the code that reads them (template.py)."""
