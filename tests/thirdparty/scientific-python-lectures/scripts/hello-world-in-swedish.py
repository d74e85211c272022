#!/usr/bin/env python
# -*- coding: UTF-8 -*-

print("Hej världen!")
