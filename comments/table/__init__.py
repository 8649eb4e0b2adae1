"""The comments table on DynamoDB: its keys and GSIs (keys), the one boto3 client factory (client),
its schema (schema) and what the pagination index sees of it (source)."""
