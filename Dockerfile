# The shop's image: gunicorn serving the site, also used for `init` and `sync` (docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Runtime dependencies only (the dev lock stays out of the image), every one, transitive ones
# included, at requirements.lock's version and hash; psycopg[binary] and the rest are wheels, so no
# compiler is needed.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

RUN useradd --system --create-home --uid 10001 --user-group shop

COPY manage.py gunicorn.conf.py ./
COPY shop ./shop
COPY comments ./comments
COPY pagination_index ./pagination_index
COPY ops ./ops
COPY metrics ./metrics
COPY moderation ./moderation
COPY templates ./templates
COPY jinja2 ./jinja2
COPY static ./static

# Hashed, compressed static files for WhiteNoise; the key only lets settings load for this step.
RUN DJANGO_SECRET_KEY=collectstatic-only python manage.py collectstatic --no-input --verbosity 0

USER shop
# In a container its own network is the boundary: gunicorn listens on it, and only what the container
# is connected to reaches it (compose: nginx, never published; on AWS, the load balancer's security group).
ENV GUNICORN_BIND=0.0.0.0:8000
EXPOSE 8000
CMD ["gunicorn", "--config", "gunicorn.conf.py", "shop.wsgi"]
